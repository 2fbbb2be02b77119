"""models/text/grammar.py's vocabulary on the shipped Gemma 3 270M: its slices (llguidance's shortcut for classes of
tokens the grammar allows all of) change how fast a mask is made, never which tokens it allows."""

from __future__ import annotations

import json

import llguidance
import numpy as np

from models.registry import shipped_model_path
from models.text.grammar import GrammarVocabulary, TokenConstraint, compile_grammar, json_schema
from models.text.tokenizer import Tokenizer

TITLE = {"type": "string", "maxLength": 24}
SCHEMA = {"type": "array", "items": {"type": "object", "properties": {"title": TITLE, "n": {"type": "integer"}},
                                     "required": ["title", "n"], "additionalProperties": False}}
# titles of every length up to the bound, a multi-byte character among them (maxLength counts characters)
DOCUMENT = [{"title": "Harbor Quantum Night Riv", "n": 1}, {"title": "", "n": 22}, {"title": "Dune", "n": 3},
            {"title": "Les Misérables, tome un", "n": 4}, {"title": "a b c d e f g h i j k l ", "n": 5}]


def masks(tokenizer: Tokenizer, vocabulary: GrammarVocabulary, text: str) -> list[np.ndarray]:
    """The mask before each token of text under SCHEMA, and after the last."""
    constraint = TokenConstraint(vocabulary, compile_grammar(vocabulary, json_schema(SCHEMA)))
    out = []
    for token in [*tokenizer.encode(text, add_bos=False), None]:
        mask = np.empty(vocabulary.mask_words, np.uint32)
        constraint.fill_mask(mask)
        out.append(mask)
        if token is not None:
            constraint.advance(token)
    return out


def test_slices_give_the_masks_of_llguidances_default_slices() -> None:
    tokenizer = Tokenizer.from_gguf(shipped_model_path())
    ours = GrammarVocabulary(tokenizer)
    default = GrammarVocabulary(tokenizer)
    default._lib = default._lib.with_slices(llguidance.LLTokenizer.general_slices())
    text = json.dumps(DOCUMENT, ensure_ascii=False, separators=(", ", ": "))
    got, want = masks(tokenizer, ours, text), masks(tokenizer, default, text)
    assert len(got) == len(want) > 40
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(a, b), f"mask {i} differs"
