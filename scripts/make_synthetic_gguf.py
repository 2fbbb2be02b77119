"""Write a random-weight GGUF with the real shapes and tensor types of a Gemma 3 model.

For speed measurements where the real file cannot travel (the GPU machine takes 64 MiB
per call): the result has the template's metadata (tokenizer included) and for every
tensor the same name, shape and GGML type, filled with random blocks whose f16 scales
are small and finite, so the arithmetic is as costly as on real weights.

    python scripts/make_synthetic_gguf.py --like model.gguf out.gguf        # same shapes as a file
    python scripts/make_synthetic_gguf.py --like model.gguf --vocab-only tok.gguf  # metadata only
    python scripts/make_synthetic_gguf.py --tokenizer tok.gguf --shape 1b out.gguf  # Gemma 3 1B shapes
    python scripts/make_synthetic_gguf.py --tokenizer tok.gguf --shape gemma4-e2b out.gguf  # Gemma 4 E2B
    python scripts/make_synthetic_gguf.py --tokenizer ggml-vocab-llama-bpe.gguf --shape llama3.2-1b out.gguf
    python scripts/make_synthetic_gguf.py --shape gemma3-4b-mmproj mmproj.gguf  # Gemma 3 4B's projector (F16)
    python scripts/make_synthetic_gguf.py --tokenizer ggml-vocab-llama-bpe.gguf --shape lfm2.5-350m out.gguf
    python scripts/make_synthetic_gguf.py --tokenizer ggml-vocab-qwen35.gguf --shape qwen3.5-0.8b f16.gguf  # then
        llama-quantize f16.gguf out.gguf Q4_K_M

The other families' shapes (DECODER_SHAPES) take the tokenizer of a llama.cpp vocab file (models/ggml-vocab-*.gguf
in its source tree: llama-bpe for Llama 3, qwen2 for Qwen 3); the embedding table gets the tokenizer's height
(LFM2's own vocabulary has 65,536 tokens; llama.cpp's tree has no LFM2 vocab file, and llama-bpe's 128,256 double
the output head's share).
The projector (gemma3_projector) is a vision tower, not a decoder: its values matter (27 layers must keep activations
finite on every engine), so it gets scaled normal weights rather than random blocks, and needs no tokenizer.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, Keys

Q = GGMLQuantizationType
# Byte offsets of the f16 scale fields in each block type (ggml's block layouts).
SCALE_OFFSETS = {Q.Q8_0: (0,), Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
                 Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}

# Gemma 3 text shapes (HF configs): hidden, layers, heads, kv heads, ffn, vocab, window, rope scaling.
# 4B: HF says 262,208 rows of embeddings, but the tokenizer written with them has 262,144 tokens and
# llama.cpp refuses a token_embd of another height, so every shape uses the tokenizer's count.
SHAPES = {
    "270m": dict(d=640, layers=18, heads=4, kv=1, ffn=2048, vocab=262144, window=512, scale=1.0),
    "1b": dict(d=1152, layers=26, heads=4, kv=1, ffn=6912, vocab=262144, window=512, scale=1.0),
    "4b": dict(d=2560, layers=34, heads=8, kv=4, ffn=10240, vocab=262144, window=1024, scale=8.0),
}
HEAD_DIM = 256
PROJECTOR_SHAPE = "gemma3-4b-mmproj"  # gemma3_projector's default shapes: Gemma 3 4B's vision tower and projector


def random_blocks(qtype: Q, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random data of a tensor in GGUF layout: rows of blocks for quantised types."""
    n = int(np.prod(shape))
    if qtype == Q.F32:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32).reshape(shape[::-1])
    if qtype == Q.F16:
        return (0.05 * rng.standard_normal(n)).astype(np.float16).reshape(shape[::-1])
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    n_blocks = n // block_size
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset in SCALE_OFFSETS[qtype]:
        scales = (rng.uniform(0.5, 1.5, n_blocks) * 2e-3).astype(np.float16)
        raw[:, offset:offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(shape[1] if len(shape) > 1 else 1, -1)


def _copy_metadata(reader: GGUFReader, writer: GGUFWriter, skip_prefix: str | None = None) -> None:
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if skip_prefix and field.name.startswith(skip_prefix):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == GGUFValueType.ARRAY:
            writer.add_array(field.name, value)
        else:
            writer.add_key_value(field.name, value, vtype)


def like(template: Path, out: Path, vocab_only: bool, seed: int) -> None:
    reader = GGUFReader(template)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch)
    _copy_metadata(reader, writer)
    rng = np.random.default_rng(seed)
    if not vocab_only:
        for t in reader.tensors:
            qtype = Q(t.tensor_type)
            shape = tuple(int(s) for s in t.shape)
            _add(writer, t.name, qtype, shape, rng)
    _write(writer)


def _dense_writer(tokenizer: GGUFReader, out: Path, arch: str, *, context: int, d: int, layers: int, ffn: int,
                  heads: int, kv: int, head_dim: int, eps: float, base: float) -> GGUFWriter:
    """A writer for arch with the tokenizer file's metadata (its own model's keys left out) and the hyperparameters
    every dense decoder states."""
    writer = GGUFWriter(out, arch)
    _copy_metadata(tokenizer, writer, skip_prefix=tokenizer.fields["general.architecture"].contents() + ".")
    writer.add_context_length(context)
    writer.add_embedding_length(d)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_freq_base(base)
    return writer


def _q4_k_m_type(k: int, more_bits: bool) -> Q:
    """llama.cpp's Q4_K_M choice for a matrix of rows k long: Q4_K, Q6_K where it gives more bits; its fallbacks
    (Q5_0, Q8_0) where rows do not divide into 256-value superblocks."""
    if k % 256 == 0:
        return Q.Q6_K if more_bits else Q.Q4_K
    return Q.Q8_0 if more_bits else Q.Q5_0


def _add_blocks(add: Callable[[str, Q, tuple[int, ...]], None], n: int, d: int, q: int, kv: int, f: int,
                norms: tuple[tuple[str, int], ...]) -> None:
    """n decoder blocks of Q4_K_M-style matrices (more bits for attn_v and ffn_down in llama.cpp's use_more_bits
    layers) after their F32 norms."""
    for i in range(n):
        more_bits = i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # llama.cpp's use_more_bits
        p = f"blk.{i}."
        for norm, width in norms:
            add(p + norm + ".weight", Q.F32, (width,))
        add(p + "attn_q.weight", _q4_k_m_type(d, False), (d, q))
        add(p + "attn_k.weight", _q4_k_m_type(d, False), (d, kv))
        add(p + "attn_v.weight", _q4_k_m_type(d, more_bits), (d, kv))
        add(p + "attn_output.weight", _q4_k_m_type(q, False), (q, d))
        add(p + "ffn_gate.weight", _q4_k_m_type(d, False), (d, f))
        add(p + "ffn_up.weight", _q4_k_m_type(d, False), (d, f))
        add(p + "ffn_down.weight", _q4_k_m_type(f, more_bits), (f, d))


def gemma3_shape(tokenizer: Path, size: str, out: Path, seed: int) -> None:
    """A Q4_K_M-style Gemma 3 of the given size: K-quants where rows divide into 256-value
    superblocks, llama.cpp's fallbacks (Q5_0 for Q4_K, Q8_0 for Q6_K) where they don't."""
    s = SHAPES[size]
    writer = _dense_writer(GGUFReader(tokenizer), out, "gemma3", context=32768, d=s["d"], layers=s["layers"],
                           ffn=s["ffn"], heads=s["heads"], kv=s["kv"], head_dim=HEAD_DIM, eps=1e-6, base=1_000_000.0)
    writer.add_sliding_window(s["window"])
    if s["scale"] != 1.0:
        writer.add_rope_scaling_type(__import__("gguf").RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(s["scale"])
    rng = np.random.default_rng(seed)

    def add(name: str, qtype: Q, shape: tuple[int, ...]) -> None:
        _add(writer, name, qtype, shape, rng)

    d = s["d"]
    add("token_embd.weight", Q.Q6_K if d % 256 == 0 else Q.Q8_0, (d, s["vocab"]))
    add("output_norm.weight", Q.F32, (d,))
    norms = (("attn_norm", d), ("post_attention_norm", d), ("ffn_norm", d), ("post_ffw_norm", d),
             ("attn_q_norm", HEAD_DIM), ("attn_k_norm", HEAD_DIM))
    _add_blocks(add, s["layers"], d, s["heads"] * HEAD_DIM, s["kv"] * HEAD_DIM, s["ffn"], norms)
    _write(writer)


# Gemma 4 E2B (HF text_config of google/gemma-4-E2B): 35 layers, 4 sliding to 1 full, 8 heads of 256 (sliding) or
# 512 (full) dims, 1 KV head, FFN 6144 (12288 in the 20 KV-shared layers: double-wide MLP), PLE of 256 per layer.
GEMMA4_E2B = dict(d=1536, layers=35, heads=8, kv=1, head_dim=256, global_head_dim=512, ffn=6144, ple=256,
                  shared=20, pattern=5, window=512, vocab=262144)


def gemma4_e2b_shape(tokenizer: Path, out: Path, seed: int, layers: int | None = None) -> None:
    """Gemma 4 E2B's shapes in a Q4_K_M-style mix (Q4_K matrices, Q6_K for token_embd, per_layer_token_embd and
    attn_v / ffn_down of llama.cpp's use_more_bits layers). layers: fewer layers (same widths) for a quick
    check; the KV-shared tail shrinks so that every shared layer still has an unshared one of its kind."""
    s = GEMMA4_E2B
    n = layers or s["layers"]
    shared = n - max(s["pattern"], n - s["shared"])
    sliding = [(i + 1) % s["pattern"] != 0 for i in range(n)]
    reader = GGUFReader(tokenizer)
    arch = "gemma4"
    writer = GGUFWriter(out, arch)
    _copy_metadata(reader, writer, skip_prefix="gemma")  # the tokenizer's keys, not its model's (gemma3., gemma4.)
    d, p, hd, ghd = s["d"], s["ple"], s["head_dim"], s["global_head_dim"]
    ffn = [s["ffn"] * (2 if i >= n - shared else 1) for i in range(n)]
    key = lambda k: k.format(arch=arch)  # noqa: E731
    for k, v in ((Keys.LLM.CONTEXT_LENGTH, 131072), (Keys.LLM.EMBEDDING_LENGTH, d), (Keys.LLM.BLOCK_COUNT, n),
                 (Keys.Attention.HEAD_COUNT, s["heads"]), (Keys.Attention.HEAD_COUNT_KV, s["kv"]),
                 (Keys.Attention.KEY_LENGTH, ghd), (Keys.Attention.VALUE_LENGTH, ghd),
                 (Keys.Attention.KEY_LENGTH_SWA, hd), (Keys.Attention.VALUE_LENGTH_SWA, hd),
                 (Keys.Attention.SLIDING_WINDOW, s["window"]), (Keys.Attention.SHARED_KV_LAYERS, shared),
                 (Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, p), (Keys.Rope.DIMENSION_COUNT, ghd),
                 (Keys.Rope.DIMENSION_COUNT_SWA, hd)):
        writer.add_uint32(key(k), v)
    writer.add_array(key(Keys.LLM.FEED_FORWARD_LENGTH), ffn)
    writer.add_array(key(Keys.Attention.SLIDING_WINDOW_PATTERN), sliding)
    writer.add_float32(key(Keys.Attention.LAYERNORM_RMS_EPS), 1e-6)
    writer.add_float32(key(Keys.Rope.FREQ_BASE), 1_000_000.0)
    writer.add_float32(key(Keys.Rope.FREQ_BASE_SWA), 10_000.0)
    writer.add_float32(key(Keys.LLM.FINAL_LOGIT_SOFTCAPPING), 30.0)
    rng = np.random.default_rng(seed)

    def add(name: str, qtype: Q, shape: tuple[int, ...]) -> None:
        _add(writer, name, qtype, shape, rng)

    add("token_embd.weight", Q.Q6_K, (d, s["vocab"]))
    add("per_layer_token_embd.weight", Q.Q6_K, (n * p, s["vocab"]))
    add("per_layer_model_proj.weight", Q.Q4_K, (d, n * p))
    add("per_layer_proj_norm.weight", Q.F32, (p,))
    add("output_norm.weight", Q.F32, (d,))
    n_rot = ghd // 8  # proportional RoPE: a quarter of the full layers' dims rotate
    writer.add_tensor("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (ghd // 2 - n_rot), np.float32))
    for i in range(n):
        more_bits = i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # llama.cpp's use_more_bits
        head = hd if sliding[i] else ghd
        q, kv = s["heads"] * head, s["kv"] * head
        pre = f"blk.{i}."
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"):
            add(pre + norm + ".weight", Q.F32, (d,))
        add(pre + "attn_q_norm.weight", Q.F32, (head,))
        add(pre + "layer_output_scale.weight", Q.F32, (1,))
        add(pre + "attn_q.weight", Q.Q4_K, (d, q))
        if i < n - shared:
            add(pre + "attn_k_norm.weight", Q.F32, (head,))
            add(pre + "attn_k.weight", Q.Q4_K, (d, kv))
            add(pre + "attn_v.weight", Q.Q6_K if more_bits else Q.Q4_K, (d, kv))
        add(pre + "attn_output.weight", Q.Q4_K, (q, d))
        add(pre + "ffn_gate.weight", Q.Q4_K, (d, ffn[i]))
        add(pre + "ffn_up.weight", Q.Q4_K, (d, ffn[i]))
        add(pre + "ffn_down.weight", Q.Q6_K if more_bits else Q.Q4_K, (ffn[i], d))
        add(pre + "inp_gate.weight", Q.Q4_K, (d, p))
        add(pre + "proj.weight", Q.Q4_K, (p, d))
    _write(writer)


# Other families (HF configs): architecture, hidden, layers, heads, kv heads, head dim, ffn, RoPE base, tied head,
# q/k norms, Llama 3's frequency factors (rope_freqs).
DECODER_SHAPES = {
    "llama3.2-1b": dict(arch="llama", d=2048, layers=16, heads=32, kv=8, head_dim=64, ffn=8192, base=500000.0,
                        tied=True, qk_norm=False, llama3_rope=True),
    "llama3.1-8b": dict(arch="llama", d=4096, layers=32, heads=32, kv=8, head_dim=128, ffn=14336, base=500000.0,
                        tied=False, qk_norm=False, llama3_rope=True),
    "qwen3-0.6b": dict(arch="qwen3", d=1024, layers=28, heads=16, kv=8, head_dim=128, ffn=3072, base=1_000_000.0,
                       tied=True, qk_norm=True, llama3_rope=False),
    "qwen3-4b": dict(arch="qwen3", d=2560, layers=36, heads=32, kv=8, head_dim=128, ffn=9728, base=1_000_000.0,
                     tied=True, qk_norm=True, llama3_rope=False),
}
# LFM2 / LFM2.5 (HF configs): conv layers everywhere but `attention`; ffn is the adjusted block_ff_dim
LFM2_SHAPES = {
    "lfm2.5-350m": dict(d=1024, layers=16, heads=16, kv=8, head_dim=64, ffn=4608, base=1_000_000.0, l_cache=3,
                        attention=(2, 5, 8, 10, 12, 14)),
}

# Qwen3.5 (HF text configs): every full_attention_interval-th layer gated full attention, the rest Gated DeltaNet
QWEN35_SHAPES = {
    "qwen3.5-0.8b": dict(d=1024, layers=24, heads=8, kv=2, head_dim=256, ffn=3584, base=10_000_000.0, rope_dims=64,
                         interval=4, k_heads=16, v_heads=16, d_k=128, d_v=128, conv=4),
}


def llama3_rope_factors(head_dim: int, base: float, factor: float = 32.0, low: float = 1.0, high: float = 4.0,
                        original: int = 8192) -> np.ndarray:
    """Llama 3.1's frequency factors, as llama.cpp's converter writes rope_freqs."""
    freqs = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * np.pi / freqs
    smooth = (original / wavelen - low) / (high - low)
    factors = np.where(wavelen < original / high, 1.0,
                       np.where(wavelen > original / low, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    return factors.astype(np.float32)


def decoder_shape(tokenizer: Path, size: str, out: Path, seed: int) -> None:
    """A Q4_K_M-style file of another family (Q4_K matrices, Q6_K for attn_v and ffn_down in llama.cpp's
    use_more_bits layers and for the output head, or for the embedding where the head is tied to it)."""
    s = DECODER_SHAPES[size]
    reader = GGUFReader(tokenizer)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    d, hd, f = s["d"], s["head_dim"], s["ffn"]
    writer = _dense_writer(reader, out, s["arch"], context=40960, d=d, layers=s["layers"], ffn=f, heads=s["heads"],
                           kv=s["kv"], head_dim=hd, eps=1e-6 if s["qk_norm"] else 1e-5, base=s["base"])
    writer.add_rope_dimension_count(hd)
    rng = np.random.default_rng(seed)

    def add(name: str, qtype: Q, shape: tuple[int, ...]) -> None:
        _add(writer, name, qtype, shape, rng)

    add("token_embd.weight", Q.Q6_K if s["tied"] else Q.Q4_K, (d, vocab))
    if not s["tied"]:
        add("output.weight", Q.Q6_K, (d, vocab))
    add("output_norm.weight", Q.F32, (d,))
    if s["llama3_rope"]:
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, s["base"]))
    norms = (("attn_norm", d), ("ffn_norm", d)) + ((("attn_q_norm", hd), ("attn_k_norm", hd)) if s["qk_norm"] else ())
    _add_blocks(add, s["layers"], d, s["heads"] * hd, s["kv"] * hd, f, norms)
    _write(writer)


def _normal(seed: int) -> Callable[..., np.ndarray]:
    """normal(shape, std, dtype=f32): seeded normal values of that spread."""
    rng = np.random.default_rng(seed)

    def normal(shape: tuple[int, ...], std: float, dtype: type = np.float32) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(dtype)

    return normal


def _clip_writer(path: Path, projector: tuple[str, str], sizes: tuple[int, ...], mean: float, std: float,
                 ) -> GGUFWriter:
    """A projector file's writer with the clip.* keys llama.cpp's converter writes: projector (its key, as the
    converter names it for the model, and type); sizes (image, patch, width, FFN, layers, text width, heads)."""
    writer = GGUFWriter(path, "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string(*projector)
    keys = ("image_size", "patch_size", "embedding_length", "feed_forward_length", "block_count", "projection_dim",
            "attention.head_count")
    for key, value in zip(keys, sizes, strict=True):
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [mean] * 3)
    writer.add_array("clip.vision.image_std", [std] * 3)
    return writer


def gemma3_projector(path: Path, *, image_size: int = 896, patch_size: int = 14, width: int = 1152, ffn: int = 4304,
                     layers: int = 27, heads: int = 16, text_width: int = 2560, seed: int = 0) -> Path:
    """A Gemma 3 projector GGUF as llama.cpp's converter writes one (`convert_hf_to_gguf.py --mmproj`: clip.* keys,
    gguf-py's tensor names, matrices F16, embeddings, norms and biases F32), at Gemma 3 4B's shapes by default
    (SigLIP so400m at 896 px: patch 14, width 1152, 27 layers of 16 heads, FFN 4304, 256 soft tokens of the text
    width 2560), with seeded normal weights: matrices of std 1/sqrt(k) and norms near 1, so that every product has
    unit-scale outputs and the residual stream grows only with the square root of the layer count (std about 6 and
    largest values about 26 after 27 layers; soft tokens of std 1): finite in f16 on every engine. layers: fewer
    layers, same widths (quick checks)."""
    normal = _normal(seed)
    side = image_size // patch_size
    writer = _clip_writer(path, ("clip.projector_type", "gemma3"), (image_size, patch_size, width, ffn, layers,
                                                                     text_width, heads), 0.5, 0.5)
    writer.add_tensor("v.patch_embd.weight", normal((width, 3, patch_size, patch_size), (3 * patch_size ** 2) ** -0.5))
    writer.add_tensor("v.patch_embd.bias", normal((width,), 0.1))
    writer.add_tensor("v.position_embd.weight", normal((side * side, width), 0.5))
    for i in range(layers):
        for name in ("ln1", "ln2"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", 1 + normal((width,), 0.1))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", normal((width,), 0.1))
        for name, rows, k in (("attn_q", width, width), ("attn_k", width, width), ("attn_v", width, width),
                              ("attn_out", width, width), ("ffn_up", ffn, width), ("ffn_down", width, ffn)):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", normal((rows, k), k ** -0.5, np.float16))
            writer.add_tensor(f"v.blk.{i}.{name}.bias", normal((rows,), 0.1))
    writer.add_tensor("v.post_ln.weight", 1 + normal((width,), 0.1))
    writer.add_tensor("v.post_ln.bias", normal((width,), 0.1))
    writer.add_tensor("mm.soft_emb_norm.weight", 1 + normal((width,), 0.2))
    writer.add_tensor("mm.input_projection.weight", normal((width, text_width), width ** -0.5, np.float16))
    _write(writer)
    return path


def gemma4_projector(path: Path, *, patch_size: int = 16, width: int = 768, ffn: int = 3072, layers: int = 16,
                     heads: int = 12, positions: int = 10240, text_width: int = 2560, seed: int = 0) -> Path:
    """A Gemma 4 projector GGUF (projector type "gemma4v") as llama.cpp's converter writes one, at
    Gemma4VisionConfig's default shapes (patch 16, width 768, 16 layers of 12 heads of 64, FFN 3072, position
    tables of 10240 a side; E4B's text width 2560), matrices F16, the patch embedding, tables and norms F32, with
    seeded normal weights scaled as gemma3_projector's (unit-scale products). layers: fewer layers, same widths."""
    normal = _normal(seed)
    writer = _clip_writer(path, ("clip.vision.projector_type", "gemma4v"), (224, patch_size, width, ffn, layers,
                                                                             text_width, heads), 0.0, 1.0)
    writer.add_tensor("v.patch_embd.weight", normal((width, 3, patch_size, patch_size), (3 * patch_size ** 2) ** -0.5))
    writer.add_tensor("v.position_embd.weight", normal((2, positions, width), 0.5))
    hd = width // heads
    for i in range(layers):
        for name in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", 1 + normal((width,), 0.1))
        for name in ("attn_q_norm", "attn_k_norm"):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", 1 + normal((hd,), 0.1))
        for name, rows, k in (("attn_q", width, width), ("attn_k", width, width), ("attn_v", width, width),
                              ("attn_out", width, width), ("ffn_gate", ffn, width), ("ffn_up", ffn, width),
                              ("ffn_down", width, ffn)):
            writer.add_tensor(f"v.blk.{i}.{name}.weight", normal((rows, k), k ** -0.5, np.float16))
    writer.add_tensor("mm.input_projection.weight", normal((text_width, width), width ** -0.5, np.float16))
    _write(writer)
    return path


def lfm2_shape(tokenizer: Path, size: str, out: Path, seed: int) -> None:
    """A Q4_K_M-style LFM2: Q4_K matrices (the conv layers' in_proj and out_proj too), Q6_K for attn_v and ffn_down in
    llama.cpp's use_more_bits layers and for the tied embedding, F32 conv taps and norms."""
    s = LFM2_SHAPES[size]
    reader = GGUFReader(tokenizer)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    d, hd, f, n = s["d"], s["head_dim"], s["ffn"], s["layers"]
    writer = _dense_writer(reader, out, "lfm2", context=128000, d=d, layers=n, ffn=f, heads=s["heads"], kv=s["kv"],
                           head_dim=hd, eps=1e-5, base=s["base"])
    # per layer, 0 for a conv layer (replaces the scalar _dense_writer wrote; gguf-py warns of the overwrite)
    writer.add_head_count_kv([s["kv"] if i in s["attention"] else 0 for i in range(n)])
    writer.add_shortconv_l_cache(s["l_cache"])
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(seed)

    def add(name: str, qtype: Q, shape: tuple[int, ...]) -> None:
        _add(writer, name, qtype, shape, rng)

    add("token_embd.weight", Q.Q6_K, (d, vocab))
    add("token_embd_norm.weight", Q.F32, (d,))  # LFM2's final norm
    for i in range(n):
        more_bits = i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # llama.cpp's use_more_bits
        p = f"blk.{i}."
        add(p + "attn_norm.weight", Q.F32, (d,))
        add(p + "ffn_norm.weight", Q.F32, (d,))
        if i in s["attention"]:
            add(p + "attn_q_norm.weight", Q.F32, (hd,))
            add(p + "attn_k_norm.weight", Q.F32, (hd,))
            add(p + "attn_q.weight", _q4_k_m_type(d, False), (d, s["heads"] * hd))
            add(p + "attn_k.weight", _q4_k_m_type(d, False), (d, s["kv"] * hd))
            add(p + "attn_v.weight", _q4_k_m_type(d, more_bits), (d, s["kv"] * hd))
            add(p + "attn_output.weight", _q4_k_m_type(s["heads"] * hd, False), (s["heads"] * hd, d))
        else:
            add(p + "shortconv.conv.weight", Q.F32, (s["l_cache"], d))
            add(p + "shortconv.in_proj.weight", _q4_k_m_type(d, False), (d, 3 * d))
            add(p + "shortconv.out_proj.weight", _q4_k_m_type(d, False), (d, d))
        add(p + "ffn_gate.weight", _q4_k_m_type(d, False), (d, f))
        add(p + "ffn_up.weight", _q4_k_m_type(d, False), (d, f))
        add(p + "ffn_down.weight", _q4_k_m_type(f, more_bits), (f, d))
    _write(writer)


def qwen35_shape(tokenizer: Path, size: str, out: Path, seed: int) -> None:
    """A Qwen3.5 as llama.cpp's converter writes it, matrices F16 (llama-quantize makes the Q4_K_M file from it, so
    every tensor gets the type the real tool picks), norms, conv taps and the recurrence's per-head constants F32:
    ssm_a = -exp(A_log) negative, as a trained model's, so the recurrent state decays rather than grows."""
    s = QWEN35_SHAPES[size]
    reader = GGUFReader(tokenizer)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    d, hd, f, n = s["d"], s["head_dim"], s["ffn"], s["layers"]
    writer = _dense_writer(reader, out, "qwen35", context=262144, d=d, layers=n, ffn=f, heads=s["heads"], kv=s["kv"],
                           head_dim=hd, eps=1e-6, base=s["base"])
    writer.add_rope_dimension_count(s["rope_dims"])
    writer.add_rope_dimension_sections([11, 11, 10, 0])
    writer.add_ssm_conv_kernel(s["conv"])
    writer.add_ssm_state_size(s["d_k"])
    writer.add_ssm_group_count(s["k_heads"])
    writer.add_ssm_time_step_rank(s["v_heads"])
    writer.add_ssm_inner_size(s["v_heads"] * s["d_v"])
    writer.add_uint32("qwen35.full_attention_interval", s["interval"])
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(seed)

    def add(name: str, qtype: Q, shape: tuple[int, ...]) -> None:
        _add(writer, name, qtype, shape, rng)

    key_dim, value_dim = s["k_heads"] * s["d_k"], s["v_heads"] * s["d_v"]
    add("token_embd.weight", Q.F16, (d, vocab))
    add("output_norm.weight", Q.F32, (d,))
    for i in range(n):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", Q.F32, (d,))
        add(p + "post_attention_norm.weight", Q.F32, (d,))
        if (i + 1) % s["interval"]:
            add(p + "attn_qkv.weight", Q.F16, (d, 2 * key_dim + value_dim))
            add(p + "attn_gate.weight", Q.F16, (d, value_dim))
            add(p + "ssm_alpha.weight", Q.F16, (d, s["v_heads"]))
            add(p + "ssm_beta.weight", Q.F16, (d, s["v_heads"]))
            add(p + "ssm_conv1d.weight", Q.F32, (s["conv"], 2 * key_dim + value_dim))
            writer.add_tensor(p + "ssm_a", -np.exp(0.5 * rng.standard_normal(s["v_heads"])).astype(np.float32))
            writer.add_tensor(p + "ssm_dt.bias", rng.standard_normal(s["v_heads"]).astype(np.float32))
            add(p + "ssm_norm.weight", Q.F32, (s["d_v"],))
            add(p + "ssm_out.weight", Q.F16, (value_dim, d))
        else:
            add(p + "attn_q.weight", Q.F16, (d, 2 * s["heads"] * hd))
            add(p + "attn_k.weight", Q.F16, (d, s["kv"] * hd))
            add(p + "attn_v.weight", Q.F16, (d, s["kv"] * hd))
            add(p + "attn_q_norm.weight", Q.F32, (hd,))
            add(p + "attn_k_norm.weight", Q.F32, (hd,))
            add(p + "attn_output.weight", Q.F16, (s["heads"] * hd, d))
        add(p + "ffn_gate.weight", Q.F16, (d, f))
        add(p + "ffn_up.weight", Q.F16, (d, f))
        add(p + "ffn_down.weight", Q.F16, (f, d))
    _write(writer)


def gemma4_audio_projector(path: Path, *, width: int = 1024, layers: int = 12, heads: int = 8, mels: int = 128,
                           channels: tuple[int, int] = (128, 32), kernel: int = 5, out_width: int = 1536,
                           text_width: int = 2560, seed: int = 0) -> Path:
    """A Gemma 4 projector GGUF with an audio tower only (audio projector type "gemma4a"), tensors named and laid
    out as llama.cpp's converter writes them, at Gemma4AudioConfig's default shapes (width 1024, 12 conformer layers
    of 8 heads, FFN 4096, subsampling channels 128 and 32, light-conv kernel 5, output 1536; E4B's text width 2560):
    matrices F16, convolutions, norms and scales F32, seeded normal weights scaled as gemma3_projector's, no clip
    bounds. layers: fewer layers, same widths."""
    normal = _normal(seed)
    writer = GGUFWriter(path, "clip")
    writer.add_bool("clip.has_vision_encoder", False)
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_string("clip.audio.projector_type", "gemma4a")
    for key, value in (("embedding_length", width), ("feed_forward_length", 4 * width), ("block_count", layers),
                       ("attention.head_count", heads), ("num_mel_bins", mels), ("projection_dim", text_width)):
        writer.add_uint32(f"clip.audio.{key}", value)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-6)
    c_in = 1
    for i, c_out in enumerate(channels):
        writer.add_tensor(f"a.conv1d.{i}.weight", normal((c_out, c_in, 3, 3), (9 * c_in) ** -0.5))
        writer.add_tensor(f"a.conv1d.{i}.norm.weight", 1 + normal((c_out,), 0.1))
        c_in = c_out
    flat = mels // 4 * channels[1]
    writer.add_tensor("a.input_projection.weight", normal((width, flat), flat ** -0.5, np.float16))
    hd = width // heads
    for i in range(layers):
        for name in ("ffn_norm", "ffn_post_norm", "ffn_norm_1", "ffn_post_norm_1", "attn_pre_norm", "attn_post_norm",
                     "conv_norm", "norm_conv", "ln2"):
            writer.add_tensor(f"a.blk.{i}.{name}.weight", 1 + normal((width,), 0.1))
        for name, rows, k in (("ffn_up", 4 * width, width), ("ffn_down", width, 4 * width),
                              ("ffn_up_1", 4 * width, width), ("ffn_down_1", width, 4 * width),
                              ("attn_q", width, width), ("attn_k", width, width), ("attn_v", width, width),
                              ("attn_out", width, width), ("attn_k_rel", width, width),
                              ("conv_pw1", 2 * width, width), ("conv_pw2", width, width)):
            writer.add_tensor(f"a.blk.{i}.{name}.weight", normal((rows, k), k ** -0.5, np.float16))
        writer.add_tensor(f"a.blk.{i}.per_dim_scale.weight", 1 + normal((hd,), 0.1))  # softplus already applied
        writer.add_tensor(f"a.blk.{i}.conv_dw.weight", normal((width, kernel), kernel ** -0.5))
    writer.add_tensor("a.pre_encode.out.weight", normal((out_width, width), width ** -0.5, np.float16))
    writer.add_tensor("a.pre_encode.out.bias", normal((out_width,), 0.1))
    writer.add_tensor("mm.a.input_projection.weight", normal((text_width, out_width), out_width ** -0.5, np.float16))
    _write(writer)
    return path


def _add(writer: GGUFWriter, name: str, qtype: Q, shape: tuple[int, ...], rng: np.random.Generator) -> None:
    """Add a tensor of GGUF shape ne (innermost first); quantised data goes in as [rows, row bytes]."""
    data = random_blocks(qtype, shape, rng)
    writer.add_tensor(name, data, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)


def _write(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--like", type=Path, help="copy shapes, types and metadata of this GGUF")
    parser.add_argument("--vocab-only", action="store_true", help="with --like: metadata only, no tensors")
    parser.add_argument("--tokenizer", type=Path, help="GGUF whose tokenizer metadata to copy (with --shape)")
    parser.add_argument("--shape", choices=sorted(SHAPES) + ["gemma4-e2b", PROJECTOR_SHAPE] + sorted(DECODER_SHAPES)
                        + sorted(LFM2_SHAPES) + sorted(QWEN35_SHAPES),
                        help="a Gemma 3 size, Gemma 4 E2B, Gemma 3 4B's projector (no --tokenizer), or another "
                        "family's model (DECODER_SHAPES)")
    parser.add_argument("--layers", type=int,
                        help=f"gemma4-e2b, {PROJECTOR_SHAPE}: this many layers, widths unchanged (quick checks)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.like:
        like(args.like, args.out, args.vocab_only, args.seed)
    elif args.shape == PROJECTOR_SHAPE:
        gemma3_projector(args.out, layers=args.layers or 27, seed=args.seed)
    elif args.shape in LFM2_SHAPES and args.tokenizer:
        lfm2_shape(args.tokenizer, args.shape, args.out, args.seed)
    elif args.shape in QWEN35_SHAPES and args.tokenizer:
        qwen35_shape(args.tokenizer, args.shape, args.out, args.seed)
    elif args.shape in DECODER_SHAPES and args.tokenizer:
        decoder_shape(args.tokenizer, args.shape, args.out, args.seed)
    elif args.shape == "gemma4-e2b" and args.tokenizer:
        gemma4_e2b_shape(args.tokenizer, args.out, args.seed, args.layers)
    elif args.shape and args.tokenizer:
        gemma3_shape(args.tokenizer, args.shape, args.out, args.seed)
    else:
        parser.error("give --like FILE, or --shape SIZE with --tokenizer FILE")


if __name__ == "__main__":
    main()
