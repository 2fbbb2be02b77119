"""Gemma 3 (text), from a GGUF file as llama.cpp's converter writes it: the shared decoder (models/text/decoder.py)
as it is, with Gemma's embedding scale and post-norms.

    x = embed(ids) * sqrt(D)                                   # x: [T, D]
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k, v = h Wq, h Wk, h Wv
        q = rope(rms_norm(q) * q_norm); k = rope(rms_norm(k) * k_norm)
        a = attention(q / sqrt(Dh), cache)    (sliding window on 5 of every 6 layers, global on the 6th)
        x += rms_norm(a Wo) * post_attention_norm
        h = rms_norm(x) * ffn_norm
        x += rms_norm((gelu_tanh(h Wgate) * h Wup) Wdown) * post_ffw_norm
    logits = rms_norm(x[last]) * output_norm  E^T             # tied output head: [R, V]

GGUF particulars: the converter bakes HF's (1 + w) RMSNorm scale into the stored weights, so norms multiply by
the stored weight as is. Sliding layers use RoPE base 10k, global layers the file's base (1M) with its linear
scaling factor, if any.
"""

from __future__ import annotations

import math

from gguf import MODEL_TENSOR, Keys

from models.formats.gguf_file import GGUFFile
from models.text.decoder import Decoder, DecoderConfig, tensor_name

SWA_PATTERN = 6  # llama.cpp and HF: every 6th layer attends globally
ROPE_BASE_LOCAL = 10_000.0  # sliding-window layers (not stored in Gemma 3 GGUFs)


def read_config(f: GGUFFile) -> DecoderConfig:
    """Gemma 3's decoder config from a GGUF's metadata."""
    _, embd_shape, _ = f.raw(tensor_name(MODEL_TENSOR.TOKEN_EMBD))
    n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
    n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
    d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
    head_dim = int(f.value(Keys.Attention.KEY_LENGTH, d_model // n_heads))
    pattern = int(f.value(Keys.Attention.SLIDING_WINDOW_PATTERN, SWA_PATTERN))
    scaling = f.value(Keys.Rope.SCALING_TYPE, "none")
    return DecoderConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        head_dims=(head_dim,) * n_layers,
        kv_heads=(int(f.value(Keys.Attention.HEAD_COUNT_KV, n_heads)),) * n_layers,
        d_ffn=(int(f.value(Keys.LLM.FEED_FORWARD_LENGTH)),) * n_layers,
        sliding=tuple((i + 1) % pattern != 0 for i in range(n_layers)),
        eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6)),
        window=int(f.value(Keys.Attention.SLIDING_WINDOW, 0)),
        rope_base_full=float(f.value(Keys.Rope.FREQ_BASE, 1_000_000.0)),
        rope_base_swa=float(f.value(Keys.Rope.FREQ_BASE_SWA, ROPE_BASE_LOCAL)),
        rope_scale_full=float(f.value(Keys.Rope.SCALING_FACTOR, 1.0)) if scaling == "linear" else 1.0,
        query_scale=1.0 / math.sqrt(head_dim),
        embed_scale=math.sqrt(d_model),
        n_ctx_train=int(f.value(Keys.LLM.CONTEXT_LENGTH)),
        vocab_size=int(embd_shape[1]),
    )


class Gemma3(Decoder):
    """Gemma 3's weights on the GPU and the programs that run its steps."""

    architecture = "gemma3"

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        return read_config(f)
