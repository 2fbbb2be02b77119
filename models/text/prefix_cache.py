"""Prefix caching's keys: which KV pages of a sequence another sequence may reuse (gpu/kv_cache.py shares them).

A full page's key is a hash chain over the tokens from the sequence's start to the page's end, and over the images
whose rows lie in those pages (their pixel digests and where they sit): two sequences share a page only if
everything that the page's keys and values depend on is the same. The KV cache's dtype and the model are the pool's
own (each engine has its pool), so they need no place in the key.

An image without a digest, and an image that a reused run would cut (its rows must go in one chunk), end the run at
the page before them. Networks with recurrent layers (LFM2) do not cache prefixes: their state after a prefix is not
kept, only the attention layers' pages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from models.text.images import ImageSpan

if TYPE_CHECKING:
    from gpu.kv_cache import KVPool


def page_keys(ids: Sequence[int], spans: Sequence[ImageSpan], page_tokens: int, n_pages: int | None = None
              ) -> list[bytes]:
    """The keys of the first full pages of a sequence of token ids (at most n_pages of them): stopped before the
    first page that holds rows of an image without a digest. spans: the sequence's images, in order."""
    full = len(ids) // page_tokens
    n = full if n_pages is None else min(full, n_pages)
    tokens = np.asarray(ids[:n * page_tokens], np.uint32)
    keys: list[bytes] = []
    chain = b""
    for i in range(n):
        start, end = i * page_tokens, (i + 1) * page_tokens
        h = hashlib.blake2b(chain, digest_size=16)
        h.update(tokens[start:end].tobytes())
        for span in spans:
            if span.start < end and span.end > start:
                if not span.digest:
                    return keys
                h.update(f"|{span.start}:{span.end}:{span.digest}".encode())
        chain = h.digest()
        keys.append(chain)
    return keys


def reusable_pages(n_found: int, n_prompt: int, spans: Sequence[ImageSpan], page_tokens: int) -> int:
    """How many of the n_found leading pages of a prompt of n_prompt tokens that the cache holds it may take: whole
    pages before its last token (whose logits are computed), ending before any image they would cut."""
    n = min(n_found, (n_prompt - 1) // page_tokens)
    for span in sorted(spans, key=lambda s: s.start, reverse=True):  # a cut moved earlier may cut an earlier image
        if span.start < n * page_tokens < span.end:
            n = span.start // page_tokens
    return n


def cached_prefix(pool: KVPool, ids: Sequence[int], spans: Sequence[ImageSpan] = ()) -> list[int]:
    """The published pages a new sequence of these prompt ids may start with (none where the pool does not cache
    prefixes): the longest cached run of its leading pages, cut as reusable_pages says."""
    if not pool.prefix_caching:
        return []
    found = pool.lookup(page_keys(ids, spans, pool.page_tokens, (len(ids) - 1) // pool.page_tokens))
    return found[:reusable_pages(len(found), len(ids), spans, pool.page_tokens)]
