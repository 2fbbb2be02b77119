"""EmbeddingGemma on the executor: a Gemma 3 encoder with bidirectional attention, mean pooling and two
Dense projections, from a sentence-transformers directory (Gemma3TextModel with use_bidirectional_attention)
or a GGUF file as llama.cpp's converter writes it (architecture "gemma-embedding").

One step over a packed batch of T tokens (gpu/ops/encoder.py):

    x = embed[ids] * sqrt(D)                                     # lookup on the host; x: [T, D]
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k, v = h Wq, h Wk, h Wv                               # q: [T, H, Dh], k, v: [T, Hkv, Dh]
        q = rope(rms_norm(q) * q_norm); k = rope(rms_norm(k) * k_norm)   at each token's position in its sequence
        a = attention(q, k, v) over the token's own sequence     # sliding layers: keys within WINDOW rows
        x += rms_norm(a Wo) * post_attention_norm
        h = rms_norm(x) * ffn_norm
        x += rms_norm((gelu_tanh(h Wgate) * h Wup) Wdown) * post_ffw_norm
    e = normalize(W3 (W2 mean_pool(rms_norm(x) * output_norm)))

Particulars: HF's RMSNorm scales by (1 + w); llama.cpp's converter bakes the +1 into the GGUF, so the
directory loader adds it. HF's bidirectional sliding mask lets a query see keys with |i - j| < window // 2 + 1,
which is llama.cpp's symmetric window (|i - j| <= window / 2): WINDOW = sliding_window // 2 rows either side.
Sliding layers use RoPE base 10k, the others the file's base (1M). Scores are scaled by
query_pre_attn_scalar^-0.5 (GGUF: head_dim^-0.5, as llama.cpp does). EmbeddingGemma was trained with
Matryoshka truncation, so /v1/embeddings' `dimensions` may shorten its vectors.

What it shares with the causal Gemma 3: the decoder config (models/text/decoder.py's DecoderConfig, read from a
GGUF by models/gemma/gemma3.py), tensor names and the weight interface (models/formats/weights.py). Its step
stays its own: the decoder's step runs causal attention over a paged KV cache, while the encoder ops
(gpu/ops/encoder.py) attend both ways within each packed sequence and keep no cache.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from gguf import MODEL_TENSOR, GGMLQuantizationType, Keys, PoolingType

from gpu.ops import encoder as ops
from gpu.ops.matmul import linear
from gpu.program import Executor, ProgramBuilder
from gpu.tensor import Tensor
from models.embeddings.engine import (
    EncoderInputs,
    EncoderLayer,
    Head,
    HFTextEncoder,
    record_head,
    record_self_attention,
)
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.safetensors_dir import ModelDir, ModelDirError
from models.formats.weights import DirSource, GGUFSource, Matrix, Progress, Uploader, dequantize_rows
from models.gemma import gemma3
from models.text.decoder import DecoderConfig, tensor_name
from models.text.tokenizer import Tokenizer

SWA_PATTERN = 6  # HF's default: every 6th layer attends to the whole sequence
_GGUF_POOLING = {PoolingType.MEAN: "mean", PoolingType.CLS: "cls", PoolingType.LAST: "last"}


def config_from_hf(c: dict[str, Any]) -> DecoderConfig:
    """The decoder config of a sentence-transformers EmbeddingGemma (transformers' Gemma3TextConfig)."""
    if not c.get("use_bidirectional_attention"):
        raise ModelDirError("a causal Gemma 3 is not an embedding model (use_bidirectional_attention is false)")
    n_layers = c["num_hidden_layers"]
    types = c.get("layer_types") or [
        "full_attention" if (i + 1) % c.get("sliding_window_pattern", SWA_PATTERN) == 0 else "sliding_attention"
        for i in range(n_layers)]
    rope = c.get("rope_parameters") or {}

    def theta(kind: str, legacy: str, default: float) -> float:
        params = rope.get(kind, rope if "rope_theta" in rope else {})
        if params.get("rope_type", "default") != "default":
            raise ModelDirError(f"RoPE type {params['rope_type']!r} is not supported")
        return float(params.get("rope_theta", c.get(legacy, default)))

    d_model, n_heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim", d_model // n_heads)
    return DecoderConfig(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, head_dims=(head_dim,) * n_layers,
        kv_heads=(c.get("num_key_value_heads", n_heads),) * n_layers, d_ffn=(c["intermediate_size"],) * n_layers,
        sliding=tuple(t == "sliding_attention" for t in types), eps=float(c.get("rms_norm_eps", 1e-6)),
        window=int(c["sliding_window"]), rope_base_full=theta("full_attention", "rope_theta", 1_000_000.0),
        rope_base_swa=theta("sliding_attention", "rope_local_base_freq", gemma3.ROPE_BASE_LOCAL),
        rope_scale_full=1.0, query_scale=float(c.get("query_pre_attn_scalar", head_dim)) ** -0.5,
        embed_scale=math.sqrt(d_model), n_ctx_train=c["max_position_embeddings"], vocab_size=c["vocab_size"],
    )


def config_from_gguf(f: GGUFFile) -> DecoderConfig:
    """The decoder config of a `gemma-embedding` GGUF: Gemma 3's keys, scores scaled by head_dim^-0.5 as
    llama.cpp does."""
    c = gemma3.read_config(f)
    return replace(c, query_scale=c.head_dims[0] ** -0.5)


# Checkpoint names: (HF name under the model, gguf MODEL_TENSOR); ".weight" is added. Norms are marked.
_LAYER = {
    "attn_norm": ("layers.{i}.input_layernorm", MODEL_TENSOR.ATTN_NORM),
    "q": ("layers.{i}.self_attn.q_proj", MODEL_TENSOR.ATTN_Q),
    "k": ("layers.{i}.self_attn.k_proj", MODEL_TENSOR.ATTN_K),
    "v": ("layers.{i}.self_attn.v_proj", MODEL_TENSOR.ATTN_V),
    "q_norm": ("layers.{i}.self_attn.q_norm", MODEL_TENSOR.ATTN_Q_NORM),
    "k_norm": ("layers.{i}.self_attn.k_norm", MODEL_TENSOR.ATTN_K_NORM),
    "o": ("layers.{i}.self_attn.o_proj", MODEL_TENSOR.ATTN_OUT),
    "post_attention_norm": ("layers.{i}.post_attention_layernorm", MODEL_TENSOR.ATTN_POST_NORM),
    "ffn_norm": ("layers.{i}.pre_feedforward_layernorm", MODEL_TENSOR.FFN_NORM),
    "gate": ("layers.{i}.mlp.gate_proj", MODEL_TENSOR.FFN_GATE),
    "up": ("layers.{i}.mlp.up_proj", MODEL_TENSOR.FFN_UP),
    "down": ("layers.{i}.mlp.down_proj", MODEL_TENSOR.FFN_DOWN),
    "post_ffw_norm": ("layers.{i}.post_feedforward_layernorm", MODEL_TENSOR.FFN_POST_NORM),
}
_MATRICES = ("q", "k", "v", "o", "gate", "up", "down")


def rope_table(head_dim: int, n_positions: int, base: float) -> np.ndarray:
    """[n_positions, head_dim] float32: cos of the angles, then their sin (HF's default RoPE, angles in f32)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = np.float32(1.0) / np.power(np.float32(base), exponents, dtype=np.float32)
    angles = np.arange(n_positions, dtype=np.float32)[:, None] * inv_freq[None, :]  # f32 products, as torch
    return np.concatenate([np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))], 1).astype(np.float32)


class EmbeddingGemma:
    """EmbeddingGemma's weights (token table on the host, layers on the GPU) and its step program."""

    matryoshka = True
    causal = False

    def __init__(self, executor: Executor, config: DecoderConfig, source: DirSource | GGUFSource, gguf: bool,
                 head: tuple[str, list[Matrix], bool], max_tokens: int, progress: Progress | None) -> None:
        self.config = c = config
        self.d_model = c.d_model
        self.vocab_size = c.vocab_size
        self.max_tokens = min(max_tokens, c.n_ctx_train)
        self._gguf, self._source = gguf, source
        self._embed_scale = np.float32(math.sqrt(c.d_model))
        total = 4 * c.d_model * (c.vocab_size + c.n_layers * (4 * c.d_model + 3 * c.d_ffn[0]))
        up = Uploader(executor, total, progress)
        embed_name = self._name(("embed_tokens", MODEL_TENSOR.TOKEN_EMBD))
        if gguf:  # rows stay in their block format, memory-mapped; a step dequantises the ones it needs
            self._embed_type, _, raw = source.f.raw(embed_name)  # type: ignore[union-attr]
            self._embed_rows = raw.reshape(c.vocab_size, -1)
        else:
            self._embed_type, self._embed_rows = GGMLQuantizationType.F32, source.array(embed_name)
        up.host(self._embed_rows.nbytes)
        self.layers = [self._layer(up, i) for i in range(c.n_layers)]
        self.output_norm = self._norm(up, self._name(("norm", MODEL_TENSOR.OUTPUT_NORM)))
        pooling, dense, normalize = head
        self.head = Head(pooling, tuple((up.matrix(f"dense{j}", m), None) for j, m in enumerate(dense)), normalize)
        self.d_out = dense[-1].n if dense else c.d_model
        n_rope, head_dim = self.max_tokens, c.head_dims[0]
        self.rope_local = executor.tensor("rope_local", (n_rope, head_dim),
                                          data=rope_table(head_dim, n_rope, c.rope_base_swa))
        self.rope_global = executor.tensor("rope_global", (n_rope, head_dim),
                                           data=rope_table(head_dim, n_rope, c.rope_base_full))
        self.weight_bytes = up.uploaded_bytes

    def _name(self, names: tuple[str, MODEL_TENSOR], i: int | None = None) -> str:
        hf, kind = names
        if self._gguf:
            return tensor_name(kind, i)
        return (hf.format(i=i) if i is not None else hf) + ".weight"

    def _norm(self, up: Uploader, name: str) -> Tensor:
        w = self._source.array(name)
        return up.vector(name, w if self._gguf else w + np.float32(1.0))  # HF's (1 + w); the GGUF has it baked in

    def _layer(self, up: Uploader, i: int) -> EncoderLayer:
        norms = {key: self._norm(up, self._name(names, i)) for key, names in _LAYER.items() if key not in _MATRICES}
        mats = {}
        for key in _MATRICES:
            name = self._name(_LAYER[key], i)
            mats[key] = up.matrix(name, self._source.matrix(name))
        return EncoderLayer(norms, mats)

    def input_rows(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """embed[ids] * sqrt(D) in float32, as HF's scaled word embedding."""
        return dequantize_rows(self._embed_rows[ids], self._embed_type) * self._embed_scale

    def record(self, b: ProgramBuilder, inputs: EncoderInputs) -> None:
        c, t = self.config, inputs.t_max
        d, d_ffn = c.d_model, c.d_ffn[0]
        x = inputs.x  # the residual stream, in place: the host writes the input rows again before every step
        for i, w in enumerate(self.layers):
            h = b.activation(f"h{i}", (t, d))
            ops.layer_norm(b, x, w.norms["attn_norm"], h, c.eps, rms=True)
            o = record_self_attention(b, i, w, h, inputs, heads=c.n_heads, kv_heads=c.kv_heads[i],
                                      head_dim=c.head_dims[i], eps=c.eps, scale=c.query_scale,
                                      rope=self.rope_local if c.sliding[i] else self.rope_global,
                                      window=c.window // 2 if c.sliding[i] else 0)
            ops.layer_norm(b, o, w.norms["post_attention_norm"], x, c.eps, rms=True, accumulate=True)
            h2 = b.activation(f"h2_{i}", (t, d))
            ops.layer_norm(b, x, w.norms["ffn_norm"], h2, c.eps, rms=True)
            gate, up = b.activation(f"gate{i}", (t, d_ffn)), b.activation(f"up{i}", (t, d_ffn))
            linear(b, w.mats["gate"], h2, gate, t)
            linear(b, w.mats["up"], h2, up, t)
            act = b.activation(f"act{i}", (t, d_ffn))
            ops.gelu(b, gate, act, up=up, tanh=True)
            down = b.activation(f"down{i}", (t, d))
            linear(b, w.mats["down"], act, down, t)
            ops.layer_norm(b, down, w.norms["post_ffw_norm"], x, c.eps, rms=True, accumulate=True)
        out = b.activation("final", (t, d))
        ops.layer_norm(b, x, self.output_norm, out, c.eps, rms=True)
        record_head(b, out, inputs, self.head)


class GGUFTextEncoder:
    """A GGUF vocabulary (models/text/tokenizer.py) with BOS, and EOS where the file asks for it; truncation keeps
    the special tokens at both ends, as the HF tokenizer's post-processor does."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_bos=True)

    def encode_truncated(self, text: str, max_tokens: int) -> list[int]:
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return ids
        tail = ids[-1:] if ids[-1] in self.tokenizer.eos_ids else []
        return ids[:max_tokens - len(tail)] + tail


def from_dir(d: ModelDir, executor: Executor, progress: Progress | None) -> tuple[EmbeddingGemma, HFTextEncoder]:
    """A sentence-transformers EmbeddingGemma directory (weights named as Gemma3TextModel's, `model.` optional)."""
    prefix = "model." if d.has("model.embed_tokens.weight") else ""
    config = config_from_hf(d.config)
    p = d.pipeline
    if any(m.bias is not None for m in p.dense):
        raise ModelDirError(f"{d.path.name}: Dense modules with a bias are not supported for EmbeddingGemma")
    dense = [Matrix(GGMLQuantizationType.F32, m.weight.shape[1], m.weight.shape[0], m.weight) for m in p.dense]
    arch = EmbeddingGemma(executor, config, DirSource(d, prefix), False, (p.pooling, dense, p.normalize),
                          p.max_seq_length or config.n_ctx_train, progress)
    return arch, HFTextEncoder(d.tokenizer())


def from_gguf(f: GGUFFile, executor: Executor, progress: Progress | None) -> tuple[EmbeddingGemma, GGUFTextEncoder]:
    """A GGUF `gemma-embedding` file: pooling from its pooling_type, dense_2 and dense_3, L2-normalised."""
    config = config_from_gguf(f)
    kind = PoolingType(int(f.value(Keys.LLM.POOLING_TYPE, PoolingType.MEAN)))
    if kind not in _GGUF_POOLING:
        raise GGUFFormatError(f"{f.path.name}: pooling type {kind.name} is not supported for embeddings")
    source = GGUFSource(f)
    dense = [source.matrix(tensor_name(t)) for t in (MODEL_TENSOR.DENSE_2_OUT, MODEL_TENSOR.DENSE_3_OUT)
             if source.has(tensor_name(t))]
    arch = EmbeddingGemma(executor, config, source, True, (_GGUF_POOLING[kind], dense, True), config.n_ctx_train,
                          progress)
    return arch, GGUFTextEncoder(Tokenizer.from_gguf(f.reader))
