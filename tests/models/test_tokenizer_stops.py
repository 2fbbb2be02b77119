"""The ids that end generation (Tokenizer.eos_ids, which the chat worker, generate and the batcher stop at) for
each model family, on small vocabulary-only GGUFs written with GGUFWriter: the family's special pieces with the
token types and special ids its llama.cpp-converted GGUF has, around a token alphabet.

The expected pieces are what llama.cpp 0.3.36 holds end-of-generation (llama_vocab_is_eog) on these same files,
checked once with llama-cpp-python; `write_family_gguf` writes the hparams its loader asks for so the files load
there as they are.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter, TokenType

from models.text.tokenizer import Tokenizer, _byte_level_table

BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]
C, U, N = TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.NORMAL
LLAMA3 = [("<|begin_of_text|>", C), ("<|end_of_text|>", C), ("<|start_header_id|>", C), ("<|end_header_id|>", C),
          ("<|eom_id|>", C), ("<|eot_id|>", C), ("<|python_tag|>", C)]
QWEN = [("<|endoftext|>", C), ("<|im_start|>", C), ("<|im_end|>", C), ("<|fim_prefix|>", C), ("<|fim_middle|>", C),
        ("<|fim_suffix|>", C), ("<|fim_pad|>", C), ("<|repo_name|>", C), ("<|file_sep|>", C), ("<tool_call>", U),
        ("</tool_call>", U)]
SPM_BASE = [("<unk>", TokenType.UNKNOWN), ("<s>", C), ("</s>", C)]

# name: (tokenizer model, pre, special pieces with types, eos piece, bos piece, the marker that ends a reply in the
# family's chat template, llama.cpp's end-of-generation pieces)
FAMILIES = {
    "llama-3.1": ("gpt2", "llama-bpe", LLAMA3, "<|eot_id|>", "<|begin_of_text|>", "<|eot_id|>",
                  {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}),
    "llama-2": ("llama", "default", SPM_BASE, "</s>", "<s>", "</s>", {"</s>"}),
    "mistral-v0.3": ("llama", "default", [*SPM_BASE, ("[INST]", C), ("[/INST]", C), ("[TOOL_CALLS]", C),
                                          ("[AVAILABLE_TOOLS]", C), ("[TOOL_RESULTS]", C)],
                     "</s>", "<s>", "</s>", {"</s>"}),
    "mistral-nemo": ("gpt2", "tekken", [*SPM_BASE, ("[INST]", C), ("[/INST]", C), ("[TOOL_CALLS]", C),
                                        ("[AVAILABLE_TOOLS]", C), ("[TOOL_RESULTS]", C)],
                     "</s>", "<s>", "</s>", {"</s>"}),
    "qwen2.5": ("gpt2", "qwen2", QWEN, "<|im_end|>", "<|endoftext|>", "<|im_end|>",
                {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}),
    "qwen3": ("gpt2", "qwen2", [*QWEN, ("<think>", U), ("</think>", U)], "<|im_end|>", "<|endoftext|>",
              "<|im_end|>", {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}),
    "smollm2": ("gpt2", "smollm", [("<|endoftext|>", C), ("<|im_start|>", C), ("<|im_end|>", C), ("<repo_name>", C),
                                   ("<reponame>", C), ("<file_sep>", C), ("<filename>", C), ("<gh_stars>", C)],
                "<|im_end|>", "<|im_start|>", "<|im_end|>", {"<|endoftext|>", "<|im_end|>", "<reponame>"}),
    "smollm3": ("gpt2", "llama-bpe", [*LLAMA3, ("<|im_start|>", C), ("<|im_end|>", C), ("<think>", U),
                                      ("</think>", U)],
                "<|im_end|>", "<|begin_of_text|>", "<|im_end|>",
                {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>", "<|im_end|>"}),
    "phi-3.5": ("llama", "default", [("<unk>", C), ("<s>", C), ("</s>", U), ("<|endoftext|>", C),
                                     ("<|assistant|>", C), ("<|system|>", C), ("<|end|>", C), ("<|user|>", C)],
                "<|endoftext|>", "<s>", "<|end|>", {"</s>", "<|endoftext|>", "<|end|>"}),
    "phi-4-mini": ("gpt2", "gpt-4o", [("<|endoftext|>", C), ("<|endofprompt|>", C), ("<|system|>", C),
                                      ("<|user|>", C), ("<|assistant|>", C), ("<|end|>", C), ("<|tool|>", C),
                                      ("<|/tool|>", C), ("<|tool_call|>", C), ("<|/tool_call|>", C),
                                      ("<|tool_response|>", C), ("<|tag|>", C)],
                   "<|endoftext|>", "<|endoftext|>", "<|end|>", {"<|endoftext|>", "<|end|>"}),
    "gemma-2": ("llama", "default", [("<pad>", C), ("<eos>", C), ("<bos>", C), ("<unk>", TokenType.UNKNOWN),
                                     ("<mask>", U), ("[@BOS@]", U), ("<start_of_turn>", U), ("<end_of_turn>", U)],
                "<eos>", "<bos>", "<end_of_turn>", {"<eos>", "<end_of_turn>"}),
}


def write_family_gguf(name: str, path: Path, chat_template: str | None = None) -> None:
    """A vocabulary-only GGUF of the family: its special pieces first, then an alphabet (byte pieces and a few
    letters for SentencePiece, GPT-2's byte-level characters for BPE)."""
    model, pre, specials, eos, bos = FAMILIES[name][:5]
    if model == "llama":
        alphabet = [*BYTE_PIECES, "\u2581", "a", "b", "\u2581a"]
        types = [int(t) for _, t in specials] + [int(TokenType.BYTE)] * 256 + [int(N)] * 4
    else:
        alphabet = [*sorted(_byte_level_table(), key=_byte_level_table().get), "Ġa"]
        types = [int(t) for _, t in specials] + [int(N)] * len(alphabet)
    tokens = [t for t, _ in specials] + alphabet
    w = GGUFWriter(str(path), "llama")
    for add, value in ((w.add_context_length, 128), (w.add_embedding_length, 16), (w.add_block_count, 1),
                       (w.add_feed_forward_length, 32), (w.add_head_count, 2), (w.add_layer_norm_rms_eps, 1e-5)):
        add(value)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if model == "llama":
        w.add_token_scores([0.0] * len(specials) + [0.0] * 256 + [-1.0, -2.0, -3.0, -0.5])
    else:
        w.add_token_merges(["Ġ a"])
    w.add_bos_token_id(tokens.index(bos))
    w.add_eos_token_id(tokens.index(eos))
    w.add_add_bos_token(model == "llama" or pre in ("llama-bpe", "tekken"))
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_end_ids(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.gguf"
    write_family_gguf(name, path)
    tok = Tokenizer.from_gguf(path)
    *_, turn_end, expected = FAMILIES[name]
    assert {tok.id_to_piece(i) for i in tok.eos_ids} == expected
    # The piece the template closes a reply with is one id, and that id stops generation.
    ids = tok.encode(turn_end, add_bos=False)
    assert len(ids) == 1 and ids[0] in tok.eos_ids
    assert tok.id_to_piece(tok.eos_id) == FAMILIES[name][3]
