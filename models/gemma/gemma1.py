"""Gemma (1) (GGUF architecture "gemma"): the shared decoder (models/text/decoder.py) with Gemma's embedding scale
and GeGLU, without the post-norms and q/k norms of later Gemmas.

    x = embed(ids) * sqrt(D)
    for each layer:
        h = rms_norm(x) * attn_norm
        x += attention(rope(h Wq) / sqrt(Dh), cache of rope(h Wk), h Wv) Wo       # NeoX RoPE
        x += (gelu_tanh(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    logits = rms_norm(x[last]) * output_norm  E^T                                 # tied head

As for every Gemma, the converter bakes HF's (1 + w) norm scale into the stored weights.
"""

from __future__ import annotations

import math

from gguf import Keys

from models.formats.gguf_file import GGUFFile
from models.text.decoder import Decoder, DecoderConfig, standard_config


class Gemma(Decoder):
    architecture = "gemma"

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
        return standard_config(f, activation="gelu_tanh", embed_scale=math.sqrt(d_model))
