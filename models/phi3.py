"""Phi-3, Phi-3.5 and Phi-4-mini (GGUF architecture "phi3"): the shared decoder (models/text/decoder.py) as Llama
runs it (no q/k norms or post-norms, SwiGLU), with its projections fused in the file and LongRoPE.

    q|k|v = h Wqkv                        (one matrix: attn_qkv)
    gate|up = h Wgate_up                  (one matrix of 2F rows: ffn_up; gate first)

LongRoPE: pair i turns at base^(-2i/Dh) / factor_i, with the file's short factors where the context fits the
original training context and its long ones beyond it (rope_factors_short / rope_factors_long, chosen as llama.cpp
chooses: by the context this model runs with), and cos and sin scaled by the file's attention factor.
"""

from __future__ import annotations

from gguf import MODEL_TENSOR, Keys

from gpu.kv_cache import rope_table
from gpu.tensor import Tensor
from models.formats.gguf_file import GGUFFile
from models.formats.weights import GGUFSource, Uploader
from models.text.decoder import Decoder, DecoderConfig, rope_table_factors, standard_config, tensor_name


class Phi3(Decoder):
    architecture = "phi3"

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        return standard_config(f)

    def _rope(self, source: GGUFSource, sliding: bool) -> Tensor:
        c, n = self.config, self.n_ctx
        dim = c.head_dims[0]
        long = n > self.original_context
        factors = tensor_name(MODEL_TENSOR.ROPE_FACTORS_LONG if long else MODEL_TENSOR.ROPE_FACTORS_SHORT)
        if source.has(factors):
            table = rope_table_factors(dim, n, c.rope_base_full, source.array(factors))
        else:
            table = rope_table(dim, n, c.rope_base_full)
        return self.executor.tensor("rope_long" if long else "rope_short", (n, dim), data=table * self.attn_factor)

    def load_globals(self, source: GGUFSource, up: Uploader) -> None:
        f = source.f
        self.original_context = int(f.value(Keys.Rope.SCALING_ORIG_CTX_LEN, self.config.n_ctx_train))
        self.attn_factor = float(f.value(Keys.Rope.SCALING_ATTN_FACTOR, 1.0))
