"""The paged KV cache: one pool of key and value rows per layer, shared by every sequence.

A sequence holds a slot (its row of the page table) and pages of page_tokens positions taken
from the pool as it grows, so sequences of any length share the memory without reserving a
whole context each, and a batch step can hold tokens of many sequences. Kernels find a
position's pool row through the page table (kernels/common/rows.wgsl).

Rows are u32 words: two f16 values per word (pack2x16float) by default, or one f32 per word
when exact arithmetic is wanted (parity tests). f16 halves the memory and the bytes attention
reads; its rounding moves Gemma 3 270M's logits by ~1e-3 (see tests/models).

Prefix caching (vLLM's automatic prefix caching): a full page whose contents are final can be published under a
key (a hash chain of the tokens up to its end, models/text/prefix_cache.py); a new sequence then takes the pages of
its prompt's longest published run by reference (share) and prefills only the rest. A page counts the slots that
hold it; one that no slot holds and that has a key stays cached, and is reclaimed least recently used when the pool
needs a page, so free_tokens counts cached pages as free. A sequence writes only positions from its n_past on, and
publishes only pages wholly before it, so a shared page is never written: the caller matches whole pages that end
before the prompt's last token (its logits are needed), and the page that token lands in is the sequence's own.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from gpu.program import Executor
from gpu.recurrent_state import RecurrentStatePool

KV_DTYPES = ("f16", "f32")
PAGE_TOKENS = 128  # positions per page unless told: few page-table reads, little waste per sequence


class PoolExhausted(RuntimeError):
    """No free slot or page is left in the KV pool."""


class KVPool:
    """Per layer a key and a value pool of n_pages * page_tokens rows; slots and pages handed out
    to sequences on demand and taken back when they close. A hybrid network's recurrent layers keep their
    per-sequence state beside it (`recurrent`, gpu/recurrent_state.py), in rows indexed by the same slots."""

    def __init__(self, executor: Executor, name: str, widths: list[int], n_ctx: int, pool_tokens: int,
                 n_slots: int, kv_dtype: str, page_tokens: int = PAGE_TOKENS) -> None:
        """widths[i] = kv_heads * head_dim of layer i; n_ctx = most positions of one sequence;
        pool_tokens = positions in the pool for all sequences together (at least one n_ctx);
        n_slots = most sequences; page_tokens = positions per page."""
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, not {kv_dtype!r}")
        self.executor = executor
        self.kv_dtype = kv_dtype
        self.n_ctx = n_ctx
        self.page_tokens = page_tokens
        self.max_pages = -(-n_ctx // page_tokens)  # pages one sequence may need
        self.n_pages = max(self.max_pages, -(-pool_tokens // page_tokens))
        self.n_slots = n_slots
        rows = self.n_pages * page_tokens
        words = [(w // 2 if self.f16 else w) for w in widths]
        self.keys = [executor.tensor(f"{name}.k{i}", (rows, n), "u32") for i, n in enumerate(words)]
        self.values = [executor.tensor(f"{name}.v{i}", (rows, n), "u32") for i, n in enumerate(words)]
        self.page_table = executor.tensor(f"{name}.pages", (n_slots, self.max_pages), "u32")
        self._table = np.zeros((n_slots, self.max_pages), np.uint32)
        self._pages: list[list[int]] = [[] for _ in range(n_slots)]  # pages held by each slot, in order
        self._free_pages = list(range(self.n_pages - 1, -1, -1))  # a stack: low pages first
        self._free_slots = list(range(n_slots - 1, -1, -1))
        self._refs = [0] * self.n_pages  # slots holding each page
        self._key_of: dict[int, bytes] = {}  # published page -> its key
        self._page_of: dict[bytes, int] = {}  # key -> the page published under it
        self._idle: OrderedDict[int, None] = OrderedDict()  # published pages no slot holds, least recently used first
        self.prefix_caching = False  # whether sequences publish and share pages (set by the engine)
        self.recurrent: RecurrentStatePool | None = None  # set by a decoder with recurrent layers

    @property
    def f16(self) -> bool:
        return self.kv_dtype == "f16"

    @property
    def nbytes(self) -> int:
        states = self.recurrent.nbytes if self.recurrent is not None else 0
        return sum(t.nbytes for t in self.keys + self.values) + states

    @property
    def free_slots(self) -> int:
        return len(self._free_slots)

    @property
    def free_tokens(self) -> int:
        """Positions of the pages a sequence can take: free ones and cached ones no sequence holds."""
        return (len(self._free_pages) + len(self._idle)) * self.page_tokens

    @property
    def cached_pages(self) -> int:
        """Published pages that no sequence holds (reclaimable)."""
        return len(self._idle)

    def pages_for(self, n_positions: int) -> int:
        """Pages that hold n_positions."""
        return -(-n_positions // self.page_tokens)

    def open_slot(self) -> int:
        """A slot for a new sequence (holding no pages yet)."""
        if not self._free_slots:
            raise PoolExhausted(f"all {self.n_slots} sequence slots of the KV cache are in use")
        return self._free_slots.pop()

    def close_slot(self, slot: int) -> None:
        """Give a sequence's pages and slot back (its published pages stay cached)."""
        self.release_pages(slot)
        self._free_slots.append(slot)

    def release_pages(self, slot: int) -> None:
        """Give a slot's pages back, keeping the slot: published ones no other slot holds become cached."""
        for page in reversed(self._pages[slot]):
            self._refs[page] -= 1
            if self._refs[page]:
                continue
            if page in self._key_of:
                self._idle[page] = None  # the most recently used
            else:
                self._free_pages.append(page)
        self._pages[slot] = []

    def holds_published(self, slot: int) -> bool:
        """Whether any of the slot's pages is published (and so must not be written again)."""
        return any(page in self._key_of for page in self._pages[slot])

    def _take_page(self) -> int:
        """A page to write: a free one, else the least recently used cached one (its key forgotten)."""
        if self._free_pages:
            page = self._free_pages.pop()
        else:
            page, _ = self._idle.popitem(last=False)
            del self._page_of[self._key_of.pop(page)]
        self._refs[page] = 1
        return page

    def lookup(self, keys: list[bytes]) -> list[int]:
        """The published pages of the longest run of keys from the first."""
        pages = []
        for key in keys:
            page = self._page_of.get(key)
            if page is None:
                break
            pages.append(page)
        return pages

    def held(self, pages: list[int]) -> int:
        """How many of these pages some slot holds (sharing them takes no free page)."""
        return sum(self._refs[page] > 0 for page in pages)

    def share(self, slot: int, pages: list[int]) -> None:
        """Let a slot that holds no pages yet start with these published pages (positions [0, len(pages) *
        page_tokens)), held by reference."""
        if self._pages[slot]:
            raise ValueError(f"slot {slot} holds pages already")
        for page in pages:
            if page not in self._key_of:
                raise ValueError(f"page {page} is not published")
            self._refs[page] += 1
            self._idle.pop(page, None)
        self._pages[slot] = list(pages)
        if pages:
            self._table[slot, :len(pages)] = pages
            self.executor.write(self.page_table, self._table[slot, :len(pages)],
                                offset_elements=slot * self.max_pages)

    def publish(self, slot: int, keys: list[bytes]) -> None:
        """Publish the slot's first len(keys) pages under these keys: the caller vouches that their positions
        are written (or will be, by submissions sent before any that reads them) and will not be written again.
        A key already published elsewhere keeps its page."""
        held = self._pages[slot]
        if len(keys) > len(held):
            raise ValueError(f"slot {slot} holds {len(held)} pages, not {len(keys)}")
        for page, key in zip(held, keys, strict=False):
            if page in self._key_of or key in self._page_of:
                continue
            self._key_of[page] = key
            self._page_of[key] = page

    def forget_prefixes(self) -> None:
        """Unpublish every page (after a failed submission their contents are in doubt): cached ones are freed,
        held ones go back free when their slots let them go."""
        self._free_pages.extend(self._idle)
        self._idle.clear()
        self._key_of.clear()
        self._page_of.clear()

    def pages_needed(self, slot: int, n_positions: int) -> int:
        """Pages a slot still lacks to hold positions [0, n_positions)."""
        return max(0, self.pages_for(n_positions) - len(self._pages[slot]))

    def reserve(self, slot: int, n_positions: int) -> None:
        """Make sure positions [0, n_positions) of the slot have pages (new entries written to the
        GPU's page table before the next submit)."""
        if n_positions > self.n_ctx:
            raise PoolExhausted(f"{n_positions} positions exceed the context of {self.n_ctx}")
        held = self._pages[slot]
        need = self.pages_needed(slot, n_positions)
        if need > len(self._free_pages) + len(self._idle):
            raise PoolExhausted(f"the KV cache has {self.free_tokens} free positions, "
                                f"{need * self.page_tokens} more are needed")
        if not need:
            return
        first = len(held)
        for _ in range(need):
            held.append(self._take_page())
        self._table[slot, first:len(held)] = held[first:]
        self.executor.write(self.page_table, self._table[slot, first:len(held)],
                            offset_elements=slot * self.max_pages + first)

    def pool_rows(self, slot: int, positions: np.ndarray) -> np.ndarray:
        """Pool rows of a slot's positions (tests and tools)."""
        positions = np.asarray(positions)
        page = self.page_tokens
        return self._table[slot, positions // page].astype(np.int64) * page + positions % page


def rope_table(head_dim: int, n_ctx: int, base: float, scale: float = 1.0) -> np.ndarray:
    """(cos, sin) of position * inv_freq for every position and rotated pair: [n_ctx, head_dim/2, 2].

    Computed as HF transformers does (inv_freq and the angle rounded to f32, then cos/sin
    of that f32 angle), so the rotation matches the reference to an ulp. scale is linear
    RoPE scaling (positions divided by the factor).
    """
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(base), exponent, dtype=np.float32)).astype(np.float32)
    inv_freq = (inv_freq / np.float32(scale)).astype(np.float32)
    angles = (np.arange(n_ctx, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    table = np.stack([np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))], axis=-1)
    return table.astype(np.float32)
