"""LFM2 and LFM2.5 (Liquid AI; GGUF architecture "lfm2"): the shared decoder (models/text/decoder.py) with most
layers a gated short convolution instead of attention, q/k norms on the attention layers, a SwiGLU feed-forward and
NeoX RoPE.

    x = embed(ids)
    for each layer:
        h = rms_norm(x) * attn_norm                                   # HF's operator_norm
        conv layers:      B, C, xs = h Win                            # in_proj: [T, 3D] -> three [T, D]
                          a = C * causal_conv(B * xs)                 # depthwise over positions, K taps (L_cache);
                                                                      # the last K - 1 inputs kept per sequence
        attention layers: a = attention(rope(rms_norm(h Wq) * q_norm), rope(rms_norm(h Wk) * k_norm), h Wv)
        x += a Wo                                                     # out_proj
        x += (silu(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    logits = rms_norm(x[last]) * output_norm  Wout                    # tied to embed

GGUF particulars: the conv layers are those with head_count_kv 0 (a per-layer array), the taps are
shortconv.conv [D, K] (the converter squeezes HF's [D, 1, K]), and the final norm is token_embd_norm (HF's
embedding_norm, applied after the last layer). No q/k row permutation: the converter writes NeoX order. Where the
file has attention.sliding_window, every attention layer attends within it (llama.cpp's reading).

No prefix caching (models/text/prefix_cache.py): a conv layer's state after a prefix is not kept, only the attention
layers' KV pages, so a prompt whose prefix another request had is prefilled whole (the engine turns it off for any
pool with recurrent state).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import MODEL_TENSOR, Keys

from gpu.kv_cache import KVPool
from gpu.ops.blocks import BlockInput, projections
from gpu.ops.short_conv import causal_short_conv
from gpu.program import ProgramBuilder
from gpu.recurrent_state import RecurrentLayerState
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Fused, GGUFSource, Uploader
from models.text.decoder import Decoder, DecoderConfig, LayerWeights, per_layer, standard_config, tensor_name

T = MODEL_TENSOR
SHORT_CONV = "short_conv"


@dataclass(frozen=True)
class ShortConvWeights:
    """A conv layer's own tensors beyond its projections."""

    taps: Tensor  # [D, K], the oldest input's tap first


class LFM2(Decoder):
    """LFM2 / LFM2.5 dense models."""

    architecture = "lfm2"
    output_norm_tensor = T.TOKEN_EMBD_NORM

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
        kv = per_layer(f.value(Keys.Attention.HEAD_COUNT_KV), n_layers)
        if all(int(v) == 0 for v in kv):
            raise GGUFFormatError("an lfm2 file without attention layers (every head_count_kv is 0)")
        kinds = tuple("attention" if int(v) else SHORT_CONV for v in kv)
        # llama.cpp: a sliding window, where the file gives one, applies to every attention layer
        window = int(f.value(Keys.Attention.SLIDING_WINDOW, 0) or 0)
        return standard_config(f, layer_kinds=kinds, window=window,
                               sliding=tuple(window > 0 and kind == "attention" for kind in kinds))

    def load_recurrent(self, source: GGUFSource, up: Uploader, i: int) -> tuple[list[Fused], QuantWeight, object]:
        d = self.config.d_model
        in_proj = tensor_name(T.SHORTCONV_INPROJ, i)
        taps = source.array(tensor_name(T.SHORTCONV_CONV, i))
        if taps.ndim != 2 or taps.shape[0] != d:
            raise GGUFFormatError(f"{tensor_name(T.SHORTCONV_CONV, i)}: taps of shape {taps.shape}, not [{d}, K]")
        inputs = [Fused(self._matrix(source, up, in_proj), [0, d, 2 * d])]
        if inputs[0].weight.n != 3 * d:
            raise GGUFFormatError(f"{in_proj}: {inputs[0].weight.n} rows, not 3 x {d}")
        output = self._matrix(source, up, tensor_name(T.SHORTCONV_OUTPROJ, i))
        return inputs, output, ShortConvWeights(up.tensor(tensor_name(T.SHORTCONV_CONV, i), taps))

    def recurrent_states(self) -> list[RecurrentLayerState]:
        c = self.config
        return [RecurrentLayerState(c.d_model, self.layers[i].recurrent.taps.shape[1]) for i in self._state_index]

    def recurrent_mixer(self, b: ProgramBuilder, pool: KVPool, w: LayerWeights, i: int, h: BlockInput, rows: Tensor,
                        t_max: int, *, prompt: bool) -> Tensor:
        assert pool.recurrent is not None and isinstance(w.recurrent, ShortConvWeights)
        (bcx, b_col), (c_tensor, c_col), (x_tensor, x_col) = projections(b, w.qkv, h, t_max, f"bcx.{i}")
        assert bcx is c_tensor is x_tensor  # one product: B, C and x are columns of one output
        out = b.activation(f"conv.{i}", (t_max, self.config.d_model))
        causal_short_conv(b, bcx, (b_col, c_col, x_col), w.recurrent.taps, pool.recurrent.conv[self._state_index[i]],
                          rows, out, prompt=prompt)
        return out
