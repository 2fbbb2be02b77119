"""Constrained decoding: grammars (JSON schemas, Lark, GBNF, regexes) turned into a token mask per step.

llguidance does the work (the library llama.cpp and vLLM use): it compiles a grammar against the model's
vocabulary and, at each step, says which tokens keep the output inside the grammar. Hearth uploads that
mask (one bit per token) with the step and the GPU sampler never picks a token outside it
(gpu/ops/sampling.py mask_logits), so constrained and free sequences share one batch. Where a mask takes longer
than a step, the batch draws unmasked and checks the token instead (allows), drawing again under the mask when
it is refused (models/text/batch.py).

    vocabulary = grammar_vocabulary(model.tokenizer)        # once per model (a second or two)
    grammar = compile_grammar(vocabulary, json_schema(schema))  # GrammarError (a client's mistake) if invalid
    constraint = TokenConstraint(vocabulary, grammar)       # one per sequence
    constraint.fill_mask(mask_row)                          # before each step: u32 [ceil(V / 32)]
    constraint.allows(token)                                # or after it, for a token drawn unmasked
    constraint.advance(token)                               # after it
    constraint.forced_tokens(16)                            # the tokens that must follow, if only one way on

Grammars are written in llguidance's Lark dialect (docs/syntax.md upstream): `%json {...}` embeds a JSON
schema, `<name>` names a special token of the vocabulary, `[lazy]` rules end at their first match.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Protocol

import numpy as np

# Resource limits for one grammar: a hostile schema (huge enums, deep nesting) fails to compile with a
# message instead of taking the worker's time or memory. Values are llguidance's defaults unless noted.
_LIMITS = {
    "max_items_in_row": 2000,
    "initial_lexer_fuel": 1_000_000,
    "step_lexer_fuel": 200_000,
    "step_max_items": 50_000,
    "max_lexer_states": 250_000,
    "max_grammar_size": 500_000,
}


# Pieces of a JSON string's text: any character but a quote, a backslash and the control characters.
_STRING_PIECE = r'[^"\\\x00-\x1F\x7F]'
# llguidance's mask adds the tokens of a "slice" (a class of tokens, here by length) at once wherever the grammar
# allows all of them, and walks the other tokens one by one. Its default slices are whitespace and string pieces of
# up to 10, up to 30 and any number of bytes, so inside a string with fewer than 10 (or 30) characters left (a
# schema's maxLength) most of a large vocabulary was walked; finer steps of length keep more of it in slices.
SLICES = [r"[\x20\x0A\x0D\x09]+", *(f"{_STRING_PIECE}{{1,{n}}}" for n in (2, 4, 6, 8, 12, 16, 24, 32)),
          f"{_STRING_PIECE}+"]

# JSON as json.dumps writes it: the model may not pad a reply with whitespace until max_tokens runs out.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(ValueError):
    """A grammar or schema that cannot be enforced: the message says which part and why."""


class TokenizerLike(Protocol):
    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_id(self) -> int: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def id_to_bytes(self, token_id: int) -> bytes: ...

    def is_special(self, token_id: int) -> bool: ...


class GrammarVocabulary:
    """A model's vocabulary as llguidance sees it: each token's bytes, marker pieces marked special (so that a
    grammar names them as tokens, `<end_of_turn>`, and no text matches them), and the end-of-sequence ids a
    finished grammar allows."""

    def __init__(self, tokenizer: TokenizerLike) -> None:
        import llguidance

        self.vocab_size = tokenizer.vocab_size
        self.eos_ids = sorted(tokenizer.eos_ids)
        tokens = []
        special = []
        for i in range(tokenizer.vocab_size):
            piece = tokenizer.id_to_bytes(i)
            if tokenizer.is_special(i):
                special.append(i)
                piece = b"\xff" + piece  # llguidance's mark for a special token
            tokens.append(piece)
        source = _TokenizerSource(tokenizer, tokens, special)
        self._lib = llguidance.LLTokenizer(llguidance.TokenizerWrapper(source), eos_token=self.eos_ids or None,
                                           slices=SLICES)

    @property
    def mask_words(self) -> int:
        """u32 words in one row of a token mask."""
        return (self.vocab_size + 31) // 32


class _TokenizerSource:
    """What llguidance.TokenizerWrapper reads from a tokenizer."""

    def __init__(self, tokenizer: TokenizerLike, tokens: list[bytes], special: list[int]) -> None:
        self._tokenizer = tokenizer
        self.tokens = tokens
        self.special_token_ids = special
        self.eos_token_id = min(tokenizer.eos_ids) if tokenizer.eos_ids else None
        self.bos_token_id = tokenizer.bos_id if tokenizer.bos_id >= 0 else None

    def __call__(self, text: str | bytes) -> list[int]:
        """Tokens whose bytes are exactly `text`'s, as llguidance needs (it forces tokens by them). A SentencePiece
        tokenizer that prefixes a space (Mistral, Gemma 1, Phi-3) adds one byte in front: that byte is taken off
        the first token, whose rest becomes the one token of those bytes or single-byte tokens."""
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        ids = self._tokenizer.encode(data.decode("utf-8", errors="replace"), add_bos=False)
        if not ids or self._bytes(ids) != b" " + data:
            return ids
        rest = self._tokenizer.id_to_bytes(ids[0])[1:]
        if not rest:
            return ids[1:]
        exact = self._by_bytes.get(rest)
        singles = [self._by_bytes.get(bytes([b])) for b in rest]
        head = [exact] if exact is not None else [i for i in singles if i is not None]
        return head + ids[1:] if self._bytes(head) == rest else ids

    def _bytes(self, ids: list[int]) -> bytes:
        return b"".join(self._tokenizer.id_to_bytes(i) for i in ids)

    @cached_property
    def _by_bytes(self) -> dict[bytes, int]:
        """Each byte string's token (the first that is not special)."""
        found: dict[bytes, int] = {}
        special = set(self.special_token_ids)
        for i, piece in enumerate(self.tokens):
            if i not in special:
                found.setdefault(piece, i)
        return found


_vocabularies: dict[int, GrammarVocabulary] = {}
_vocabularies_lock = threading.Lock()


def grammar_vocabulary(tokenizer: TokenizerLike) -> GrammarVocabulary:
    """The tokenizer's GrammarVocabulary, built on first use (a second or two for 262,144 pieces) and kept."""
    with _vocabularies_lock:
        vocabulary = _vocabularies.get(id(tokenizer))
        if vocabulary is None or getattr(tokenizer, "_grammar_vocabulary", None) is not vocabulary:
            vocabulary = GrammarVocabulary(tokenizer)
            _vocabularies[id(tokenizer)] = vocabulary
            try:
                tokenizer._grammar_vocabulary = vocabulary  # type: ignore[attr-defined]  # ties the cache entry
            except AttributeError:
                pass
        return vocabulary


# -- grammar sources ---------------------------------------------------------------------------------------------

def json_schema(schema: Mapping[str, Any]) -> str:
    """The grammar of JSON documents that match a schema, laid out as json.dumps does (", " and ": " between
    items, no other whitespace): a model may not pad its reply with whitespace until max_tokens runs out."""
    import llguidance

    try:
        return llguidance.LLMatcher.grammar_from_json_schema(dict(schema), overrides=JSON_LAYOUT)
    except (ValueError, TypeError) as error:
        raise GrammarError(f"invalid JSON schema: {error}") from error


def lark(source: str) -> str:
    """A grammar in llguidance's Lark dialect."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_lark(source)


def gbnf_to_lark(source: str) -> str:
    """llguidance's Lark source of a GBNF grammar (its root rule becomes `start`)."""
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        return any_to_lark(source)
    except Exception as error:  # noqa: BLE001 - the converter raises bare Exceptions on bad input
        raise GrammarError(f"invalid GBNF grammar: {error}") from error


def regex(pattern: str) -> str:
    """The grammar of strings matching a regular expression (Rust regex syntax)."""
    import llguidance

    return llguidance.LLMatcher.grammar_from_regex(pattern)


def lark_json(schema: Mapping[str, Any]) -> str:
    """A schema as a `%json {...}` item to use inside a Lark grammar, laid out as json_schema's."""
    options = {**JSON_LAYOUT, **dict(schema).get("x-guidance", {})} if isinstance(schema, Mapping) else JSON_LAYOUT
    return "%json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


def compile_grammar(vocabulary: GrammarVocabulary, grammar: str) -> str:
    """Check a grammar against the vocabulary; GrammarError naming what cannot be enforced."""
    import llguidance

    limits = llguidance.LLParserLimits(**_LIMITS)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, vocabulary._lib,
                                                                             limits=limits)
    if is_error:
        raise GrammarError(_clean(messages[0] if messages else "the grammar is invalid"))
    # llguidance ignores schema keywords it cannot enforce with a warning: refuse them instead of a reply that
    # only looks constrained.
    unsupported = [m for m in messages if "unimplemented" in m.lower() or "not supported" in m.lower()
                   or "unknown" in m.lower() or "ignor" in m.lower()]
    if unsupported:
        raise GrammarError(_clean("; ".join(unsupported)))
    return grammar


def _clean(message: str) -> str:
    message = message.strip()
    return message[:1000] + ("..." if len(message) > 1000 else "")


# -- per sequence ------------------------------------------------------------------------------------------------

_executor: Any = None
_executor_lock = threading.Lock()


def fill_masks(constraints: list[TokenConstraint], out: np.ndarray) -> None:
    """fill_mask for several sequences at once: row i of out (u32 [n, mask_words]) gets constraints[i]'s mask,
    computed on llguidance's thread pool (a mask of a large vocabulary takes tens to hundreds of microseconds, and
    the rows of a batch wait for the slowest of them, not for their sum)."""
    global _executor
    if len(constraints) == 1:
        constraints[0].fill_mask(out[0])
        return
    import llguidance

    words = constraints[0].vocabulary.mask_words if constraints else 0
    if out.dtype != np.uint32 or out.shape != (len(constraints), words) or not out.flags["C_CONTIGUOUS"]:
        raise ValueError(f"token masks are a contiguous u32 [{len(constraints)}, {words}], not {out.dtype} {out.shape}")
    with _executor_lock:
        if _executor is None:
            _executor = llguidance.LLExecutor()
    _executor.unsafe_compute_mask_ptr([(c._matcher, i) for i, c in enumerate(constraints)], out.ctypes.data,
                                      words * 4, len(constraints))
    for c in constraints:
        c._check()


class TokenConstraint:
    """One sequence's grammar state: the mask of allowed next tokens, advanced token by token."""

    def __init__(self, vocabulary: GrammarVocabulary, grammar: str) -> None:
        import llguidance

        self.vocabulary = vocabulary
        self._matcher = llguidance.LLMatcher(vocabulary._lib, grammar, log_level=0,
                                             limits=llguidance.LLParserLimits(**_LIMITS))
        if self._matcher.is_error():
            raise GrammarError(_clean(self._matcher.get_error()))

    def copy(self) -> TokenConstraint:
        """An independent constraint in the same state (one per choice of a request)."""
        twin = object.__new__(TokenConstraint)
        twin.vocabulary = self.vocabulary
        twin._matcher = self._matcher.deep_copy()
        return twin

    def fill_mask(self, out: np.ndarray) -> None:
        """Write the allowed next tokens into out (u32 [mask_words], bit i % 32 of word i // 32 = token i)."""
        if out.dtype != np.uint32 or out.shape != (self.vocabulary.mask_words,) or not out.flags["C_CONTIGUOUS"]:
            raise ValueError(f"a token mask is a contiguous u32 [{self.vocabulary.mask_words}], not "
                             f"{out.dtype} {out.shape}")
        self._matcher.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
        self._check()

    def allows(self, token: int) -> bool:
        """Whether the grammar takes this token next (what the mask's bit says, without computing the mask)."""
        return self._matcher.validate_tokens([token]) == 1

    def advance(self, token: int) -> None:
        """Take a sampled token (one the mask allowed); GrammarError if the grammar refuses it."""
        if not self._matcher.consume_token(token):
            raise GrammarError(_clean(self._matcher.get_error() or f"the grammar refused token {token}"))

    def forced_tokens(self, limit: int) -> list[int]:
        """The tokens the grammar forces next (at most limit), the only ones its masks would allow one after the
        other (llguidance's fast-forward tokens, in the vocabulary's canonical tokenization); not consumed: advance
        takes each in turn. Empty where the next token is the model's choice."""
        if limit <= 0 or self._matcher.is_stopped():
            return []
        return self._matcher.compute_ff_tokens()[:limit]

    def _check(self) -> None:
        if self._matcher.is_error():
            raise GrammarError(_clean(self._matcher.get_error()))

    @property
    def finished(self) -> bool:
        """Whether the grammar is complete and allows nothing more (the sequence ends here)."""
        return self._matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        """Whether the output so far is a whole sentence of the grammar (it may still go on)."""
        return self._matcher.is_accepting()
