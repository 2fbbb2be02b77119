"""Qwen3.5 (GGUF architecture "qwen35"): the shared decoder (models/text/decoder.py) with three of every four layers
Gated DeltaNet linear attention instead of attention, a gated full attention on the rest, a SwiGLU feed-forward.

    x = embed(ids)
    for each layer:
        h = rms_norm(x) * attn_norm
        linear layers:    qkv, z, a, b = h Wqkv, h Wgate, h Walpha, h Wbeta
                          qkv = silu(causal_conv(qkv))                      # depthwise, K taps over positions
                          o = gated_delta_rule(q, k, v, a, b)               # per value head, a [Dk, Dv] state;
                                                                            # prompts in its chunked form
                          a = rms_norm(o) * ssm_norm * silu(z)              # per value head
        attention layers: q, g = h Wq (each head's query, then its gate)
                          a = attention(rope(rms_norm(q) * q_norm), rope(rms_norm(h Wk) * k_norm), h Wv)
                          a *= sigmoid(g)                                   # per head
        x += a Wo                                                           # ssm_out on linear layers
        x += (silu(rms_norm(x) * ffn_norm Wgate) * (... Wup)) Wdown
    logits = rms_norm(x[last]) * output_norm  Wout                         # tied to embed unless the file has output

RoPE turns the first rope.dimension_count dims of each head (transformers' partial_rotary_factor) in NeoX pairs;
the file's multimodal sections all take the text position for text, which is plain RoPE. The recurrence and its
kernels: gpu/ops/gated_delta.py; the convolution: gpu/ops/short_conv.py; their state: gpu/recurrent_state.py.

GGUF particulars (llama.cpp's converter): the feed-forward's norm is post_attention_norm; every RMS norm weight is
stored as 1 + w (transformers computes with 1 + w) except ssm_norm, stored as is; ssm_a is -exp(A_log); value heads
are in the converter's tiled order (value head h reads key head h mod group_count). The recurrent layers are
attention.recurrent_layers where the file has it, else all but every full_attention_interval-th.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import MODEL_TENSOR, Keys

from gpu.kv_cache import KVPool
from gpu.ops.blocks import BlockInput, projections
from gpu.ops.gated_delta import DeltaShape, gated_delta_rule, gated_rms_norm
from gpu.ops.short_conv import causal_conv
from gpu.program import Executor, ProgramBuilder
from gpu.recurrent_state import RecurrentLayerState
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Fused, GGUFSource, Uploader
from models.text.decoder import (
    Decoder,
    DecoderConfig,
    LayerWeights,
    Progress,
    per_layer,
    standard_config,
    tensor_name,
)

T = MODEL_TENSOR
DELTA_NET = "gated_delta_net"


@dataclass(frozen=True)
class DeltaNetWeights:
    """A linear-attention layer's own tensors beyond its projections."""

    taps: Tensor  # [conv channels, K], the oldest input's tap first
    ssm_a: Tensor  # [value heads], -exp(A_log)
    dt_bias: Tensor  # [value heads]
    norm: Tensor  # [value head dim], the gated norm's weight


def delta_shape(f: GGUFFile) -> DeltaShape:
    """The linear-attention layers' heads from the file's ssm keys."""
    h_k, h_v = int(f.value(Keys.SSM.GROUP_COUNT)), int(f.value(Keys.SSM.TIME_STEP_RANK))
    inner = int(f.value(Keys.SSM.INNER_SIZE))
    if not h_k or h_v % h_k or inner % h_v:
        raise GGUFFormatError(f"ssm heads: {h_v} value heads over {h_k} key heads, inner size {inner}")
    return DeltaShape(h_k=h_k, h_v=h_v, d_k=int(f.value(Keys.SSM.STATE_SIZE)), d_v=inner // h_v, v_tiled=True)


class Qwen35(Decoder):
    """Qwen3.5 dense text models."""

    architecture = "qwen35"
    ffn_norm_tensor = T.ATTN_POST_NORM

    def __init__(self, executor: Executor, f: GGUFFile, n_ctx: int, progress: Progress | None = None) -> None:
        self.delta = delta_shape(f)
        super().__init__(executor, f, n_ctx, progress)

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
        recurrent = f.value("{arch}.attention.recurrent_layers", None)
        if recurrent is None:
            interval = int(f.value("{arch}.full_attention_interval", 4))
            recurrent = [(i + 1) % interval != 0 for i in range(n_layers)]
        kinds = tuple(DELTA_NET if r else "attention" for r in per_layer(recurrent, n_layers))
        if DELTA_NET not in kinds or "attention" not in kinds:
            raise GGUFFormatError("a qwen35 file needs both linear-attention and full-attention layers")
        head_dim = int(f.value(Keys.Attention.KEY_LENGTH))
        return standard_config(f, layer_kinds=kinds, rope_dims=int(f.value(Keys.Rope.DIMENSION_COUNT, head_dim)),
                               attn_output_gate=True)

    def load_recurrent(self, source: GGUFSource, up: Uploader, i: int) -> tuple[list[Fused], QuantWeight, object]:
        shape = self.delta
        names = [tensor_name(kind, i) for kind in (T.ATTN_QKV, T.ATTN_GATE, T.SSM_ALPHA, T.SSM_BETA)]
        inputs = up.fused([(name, source.matrix(name)) for name in names])
        widths = [f.weight.n for f in inputs]
        if sum(widths) != shape.conv_dim + shape.value_dim + 2 * shape.h_v:
            raise GGUFFormatError(f"layer {i}: projections of {widths} rows for ssm heads {shape}")
        if len(_columns(inputs)) != 4 or _columns(inputs)[2][0] != _columns(inputs)[3][0]:
            raise GGUFFormatError(f"layer {i}: ssm_alpha and ssm_beta of different types")
        taps = source.array(tensor_name(T.SSM_CONV1D, i))
        if taps.shape != (shape.conv_dim, taps.shape[-1]):
            raise GGUFFormatError(f"{tensor_name(T.SSM_CONV1D, i)}: taps of shape {taps.shape}, not "
                                  f"[{shape.conv_dim}, K]")
        own = DeltaNetWeights(
            taps=up.tensor(tensor_name(T.SSM_CONV1D, i), taps),
            ssm_a=self._vector(source, up, tensor_name(T.SSM_A, i, None)),
            dt_bias=self._vector(source, up, tensor_name(T.SSM_DT, i, "bias")),
            norm=self._vector(source, up, tensor_name(T.SSM_NORM, i)))
        return inputs, self._matrix(source, up, tensor_name(T.SSM_OUT, i)), own

    def recurrent_states(self) -> list[RecurrentLayerState]:
        shape = self.delta
        return [RecurrentLayerState(shape.conv_dim, self.layers[i].recurrent.taps.shape[1], shape.matrix)
                for i in self._state_index]

    def recurrent_mixer(self, b: ProgramBuilder, pool: KVPool, w: LayerWeights, i: int, h: BlockInput, rows: Tensor,
                        t_max: int, *, prompt: bool) -> Tensor:
        assert pool.recurrent is not None and isinstance(w.recurrent, DeltaNetWeights)
        shape, state = self.delta, self._state_index[i]
        (qkv, qkv_col), (z, z_col), (alpha, a_col), (beta, b_col) = projections(b, w.qkv, h, t_max, f"qkvz.{i}")
        conv = b.activation(f"conv.{i}", (t_max, shape.conv_dim))
        causal_conv(b, qkv, qkv_col, w.recurrent.taps, pool.recurrent.conv[state], rows, conv, "silu", prompt=prompt)
        matrix = pool.recurrent.matrix[state]
        assert matrix is not None
        o = b.activation(f"delta.{i}", (t_max, shape.value_dim))
        gated_delta_rule(b, conv, alpha, beta, w.recurrent.ssm_a, w.recurrent.dt_bias, rows, matrix, o, shape=shape,
                         alpha_offset=a_col, beta_offset=b_col, prompt=prompt, name=f"delta.{i}")
        y = b.activation(f"gated_norm.{i}", (t_max, shape.value_dim))
        gated_rms_norm(b, o, z, w.recurrent.norm, y, head_dim=shape.d_v, heads=shape.h_v, eps=self.config.eps,
                       z_offset=z_col)
        return y


def _columns(fused: list[Fused]) -> list[tuple[int, int]]:
    """(matrix index, first row) of each part of fused matrices, in order."""
    return [(j, start) for j, f in enumerate(fused) for start in f.parts]
