"""Qwen 2 / 2.5 and Qwen 3 (GGUF architectures "qwen2", "qwen3"): the shared decoder (models/text/decoder.py)
without post-norms, with a SwiGLU feed-forward and NeoX RoPE.

    x = embed(ids)
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k, v = h Wq + bq, h Wk + bk, h Wv + bv                 # Qwen 2: biases; Qwen 3: none
        q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm         # Qwen 3 only, per head
        x += attention(rope(q) / sqrt(Dh), cache of rope(k), v) Wo
        x += (silu(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    logits = rms_norm(x[last]) * output_norm  Wout

What differs between the two is read off the file's tensors (biases, q/k norms), so one config serves both.
"""

from __future__ import annotations

from models.formats.gguf_file import GGUFFile
from models.text.decoder import Decoder, DecoderConfig, standard_config


class Qwen2(Decoder):
    architecture = "qwen2"

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        return standard_config(f)


class Qwen3(Qwen2):
    architecture = "qwen3"
