"""Gemma 2 (GGUF architecture "gemma2"): the shared decoder (models/text/decoder.py) with Gemma's pre- and
post-norms, embedding scale and GeGLU, no q/k norms, sliding-window attention on every other layer, and
softcapped attention and output logits.

    x = embed(ids) * sqrt(D)
    for each layer (even layers: a sliding window; odd layers: global):
        h = rms_norm(x) * attn_norm
        s = q . k * query_scale;  s = 50 tanh(s / 50)                       # attention logit softcap
        x += rms_norm(softmax(s) v Wo) * post_attention_norm
        x += rms_norm((gelu_tanh(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown) * post_ffw_norm
    logits = 30 tanh(rms_norm(x[last]) * output_norm E^T / 30)             # final logit softcap

The query scale is llama.cpp's: 1/sqrt(D/H) for the 27B (46 layers; HF's query_pre_attn_scalar there),
1/sqrt(Dh) otherwise, as the file stores no scale.
"""

from __future__ import annotations

import math

from gguf import Keys

from models.formats.gguf_file import GGUFFile
from models.text.decoder import Decoder, DecoderConfig, standard_config

SWA_PATTERN = 2  # llama.cpp and HF: layer i slides where i % 2 == 0
WINDOW = 4096  # llama.cpp's default where the file has no sliding_window
LAYERS_27B = 46


def sliding_layers(f: GGUFFile, n_layers: int, pattern: int) -> tuple[bool, ...]:
    """Which layers use the sliding window: the file's per-layer array, or its pattern n (every n-th layer
    global, llama.cpp's set_swa_pattern), or the family's."""
    value = f.value(Keys.Attention.SLIDING_WINDOW_PATTERN, pattern)
    if isinstance(value, (list, tuple)):
        return tuple(bool(v) for v in value)
    return tuple(i % int(value) < int(value) - 1 for i in range(n_layers))


class Gemma2(Decoder):
    architecture = "gemma2"

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
        d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
        n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
        head_dim = int(f.value(Keys.Attention.KEY_LENGTH, d_model // n_heads))
        scale_dim = d_model // n_heads if n_layers == LAYERS_27B else head_dim
        return standard_config(
            f,
            activation="gelu_tanh",
            embed_scale=math.sqrt(d_model),
            eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6)),
            sliding=sliding_layers(f, n_layers, SWA_PATTERN),
            window=int(f.value(Keys.Attention.SLIDING_WINDOW, WINDOW)),
            query_scale=1.0 / math.sqrt(scale_dim),
            softcap=float(f.value(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, 0.0)),
            attn_softcap=float(f.value(Keys.LLM.ATTN_LOGIT_SOFTCAPPING, 0.0)),
        )
