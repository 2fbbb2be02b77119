"""models/text/tokenizer.py on llama.cpp's own vocabulary files: real vocabularies of the model families, the ids
llama.cpp's tests expect for them (tests/models/llama_cpp_vocab.py fetches the files), and llama.cpp's BOS and
end-of-generation ids.

llama.cpp's test-tokenizer-0 tokenizes with add_special=false and parse_special=false; Hearth's encode always
parses special pieces, which changes nothing here (no test string holds a special piece's text).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models.text.tokenizer import Tokenizer
from tests.models.llama_cpp_vocab import VocabUnavailable, read_cases, vocab_dir

# Vocabulary file -> the families whose tokenizer it is (or shares its pre-tokenizer with).
FAMILIES = {
    "llama-bpe": "Llama 3.x, SmolLM3 (BPE, pre llama-bpe)",
    "qwen2": "Qwen 2 / 2.5 / 3, Qwen3-Embedding (BPE, pre qwen2)",
    "llama-spm": "Llama 2, TinyLlama, Mistral v0.3 (SentencePiece)",
    "phi-3": "Phi-3 / 3.5 (SentencePiece)",
    "gpt-2": "GPT-2 (BPE, pre gpt-2)",
    "starcoder": "SmolLM / SmolLM2's split: pre smollm has starcoder's regexes",
}
# The other kinds Hearth supports that llama.cpp has test vectors for; the larger files only in the slow run.
OTHERS = ("falcon", "mpt", "refact")
LARGE_OTHERS = ("qwen35", "command-r", "gemma-4")

# llama.cpp 0.3.36 on each file (llama_vocab_get_add_bos, llama_vocab_bos, and every id llama_vocab_is_eog holds).
# Hearth parts from llama.cpp's end ids on purpose in one place: Gemma 4's "<|tool_response>" (see tokenizer.py).
LLAMA_CPP = {
    "llama-bpe": {"add_bos": True, "bos": 128000, "eog": {128001, 128009}},
    "qwen2": {"add_bos": False, "bos": 151643, "eog": {128247, 151643, 151645}},
    "llama-spm": {"add_bos": True, "bos": 1, "eog": {2}},
    "phi-3": {"add_bos": True, "bos": 1, "eog": {2, 32000, 32007}},
    "gpt-2": {"add_bos": False, "bos": 50256, "eog": {50256}},
    "starcoder": {"add_bos": False, "bos": 0, "eog": {0, 4}},
    "qwen35": {"add_bos": False, "bos": 151643, "eog": {128247, 151643, 151645}},
    "falcon": {"add_bos": False, "bos": 11, "eog": {11}},
    "mpt": {"add_bos": False, "bos": 0, "eog": {0}},
    "refact": {"add_bos": False, "bos": 0, "eog": {0, 4, 18}},
    "command-r": {"add_bos": True, "bos": 5, "eog": {0, 255001}},
    "gemma-4": {"add_bos": True, "bos": 2, "eog": {1, 106}},  # llama.cpp adds 50, "<|tool_response>"
}


@pytest.fixture(scope="module")
def models_dir() -> Path:
    try:
        return vocab_dir((*FAMILIES, *OTHERS, *LARGE_OTHERS))  # one download for both runs
    except VocabUnavailable as error:
        pytest.skip(str(error))


@pytest.mark.parametrize("name", [*FAMILIES, *OTHERS, *(pytest.param(n, marks=pytest.mark.slow) for n in LARGE_OTHERS)])
def test_vocabulary_matches_llama_cpp(models_dir: Path, name: str) -> None:
    """Every test string's ids, BOS where llama.cpp adds it, and the ids that end generation."""
    path = models_dir / f"ggml-vocab-{name}.gguf"
    tok = Tokenizer.from_gguf(path)
    cases = read_cases(path)
    assert len(cases) >= 40
    wrong = [(text, ids, tok.encode(text, add_bos=False)) for text, ids in cases
             if tok.encode(text, add_bos=False) != ids]
    assert not wrong, f"{name}: {len(wrong)} of {len(cases)} differ, first: {wrong[:3]}"
    expected = LLAMA_CPP[name]
    assert tok.bos_id == expected["bos"]
    bos = [expected["bos"]] if expected["add_bos"] else []
    assert tok.encode("Hello", add_bos=True) == bos + tok.encode("Hello", add_bos=False)
    assert tok.eos_ids == expected["eog"], {i: tok.id_to_piece(i) for i in tok.eos_ids ^ expected["eog"]}
