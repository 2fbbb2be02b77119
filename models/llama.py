"""Llama 2 and 3.x, Mistral, TinyLlama and SmolLM2 (GGUF architecture "llama"), and SmolLM3: the shared decoder
(models/text/decoder.py) without q/k norms or post-norms, with a SwiGLU feed-forward.

    x = embed(ids)
    for each layer:
        h = rms_norm(x) * attn_norm
        a = attention(rope(h Wq) / sqrt(Dh), cache of rope(h Wk), h Wv)     # GQA
        x += a Wo
        x += (silu(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    logits = rms_norm(x[last]) * output_norm  Wout                          # Wout: tied to embed where absent

GGUF particulars: llama.cpp's converter permutes q and k rows for its interleaved RoPE; the decoder puts them back
in NeoX order at load (rope_interleaved). Llama 3.1+'s frequency scaling comes as the rope_freqs tensor. SmolLM3
skips RoPE in every 4th layer (llama.cpp's n_no_rope_layer_step).
"""

from __future__ import annotations

from gguf import Keys

from models.formats.gguf_file import GGUFFile
from models.text.decoder import Decoder, DecoderConfig, standard_config

SMOLLM3_NO_ROPE_STEP = 4  # llama.cpp and HF: layers i with (i + 1) % 4 == 0 attend without RoPE


class Llama(Decoder):
    """Llama-architecture files: Llama 2/3.x, Mistral, TinyLlama, SmolLM2."""

    architecture = "llama"
    rope_interleaved = True

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        return standard_config(f)


class SmolLM3(Decoder):
    """SmolLM3: Llama with RoPE left out of every 4th layer."""

    architecture = "smollm3"
    rope_interleaved = True

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
        return standard_config(f, no_rope=tuple((i + 1) % SMOLLM3_NO_ROPE_STEP == 0 for i in range(n_layers)))
