"""Host side of the kernels Gemma 4 adds to the transformer ones (gpu/ops/transformer.py).

Each function adds one dispatch to a program and names the kernel file it dispatches; T is the
program's maximum tokens per step, kernels skip rows past the step's n_tokens (or n_out).
"""

from __future__ import annotations

import math

from gpu.ops.transformer import residual_norm_split
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels


def residual_scale_norm(
    b: ProgramBuilder, y: Tensor, post_weight: Tensor, x: Tensor, scale: Tensor, next_weight: Tensor, h: Tensor,
    eps: float, *, out_rows: Tensor | None = None,
) -> None:
    """x = (x + rms_norm(y) * post_weight) * scale[0], then h = rms_norm(x) * next_weight, per row
    (kernels/residual_scale_norm.wgsl). out_rows (u32 [R]): only the step's first n_out rows listed there,
    into h[0..n_out) (the last block, before the output head)."""
    constants = residual_norm_split(b, post_weight.numel) | {"EPS": eps, "GATHER": out_rows is not None}
    # without GATHER the out_rows binding is not read: scale stands in
    tensors = [b.step, y, post_weight, x, scale, next_weight, h, out_rows or scale]
    b.dispatch("residual_scale_norm", constants, tensors,
               workgroup_grid(out_rows.numel if out_rows is not None else x.shape[0]))


def ple_combine(b: ProgramBuilder, proj: Tensor, norm_weight: Tensor, tok: Tensor, layers: int, eps: float,
                proj_scale: float) -> None:
    """In place on tok: per token and layer, (rms_norm(proj * proj_scale) * norm_weight + tok) / sqrt(2)
    (kernels/ple_combine.wgsl)."""
    p = norm_weight.numel
    constants = {"P": p, "LAYERS": layers, "EPS": eps, "PROJ_SCALE": proj_scale, "COMBINE": 2.0 ** -0.5}
    b.dispatch("ple_combine", constants, [b.step, proj, norm_weight, tok], workgroup_grid(tok.shape[0] * layers))


def ple_gelu_mul(b: ProgramBuilder, g: Tensor, pli: Tensor, layer: int, out: Tensor) -> None:
    """out = gelu_tanh(g) * pli[:, layer * P : (layer + 1) * P] (kernels/ple_gelu_mul.wgsl)."""
    p = g.shape[1]
    constants = {"P": p, "STRIDE": pli.shape[1], "OFFSET": layer * p}
    b.dispatch("ple_gelu_mul", constants, [b.step, g, pli, out],
               workgroup_grid(math.ceil(g.shape[0] * p / ELEMENTWISE_GROUP)))


def softcap(b: ProgramBuilder, logits: Tensor, cap: float) -> None:
    """In place: logits = cap * tanh(logits / cap) for the step's n_out rows (kernels/softcap.wgsl)."""
    v = logits.shape[1]
    b.dispatch("softcap", {"V": v, "CAP": cap}, [b.step, logits],
               workgroup_grid(math.ceil(logits.shape[0] * v / ELEMENTWISE_GROUP)))


def moe_route(b: ProgramBuilder, scores: Tensor, expert_scale: Tensor, weights: Tensor, choice: Tensor,
              route: Tensor) -> None:
    """The router's choices from its scores [T, E] (softmax, the top_k kept and renormalised, times each
    expert's scale), written two ways: dense weights [T, E] (0 for experts not chosen), and the choices
    choice (u32 [T, top_k]) with their weights route [T, top_k] (kernels/moe_route.wgsl)."""
    experts, top_k = scores.shape[1], choice.shape[1]
    b.dispatch("moe_route", {"EXPERTS": experts, "TOP_K": top_k},
               [b.step, scores, expert_scale, weights, choice, route], workgroup_grid(math.ceil(scores.shape[0] / 64)))


def moe_matvec(b: ProgramBuilder, weight: QuantWeight, x: Tensor, choice: Tensor, route: Tensor, y: Tensor, *,
               down: bool) -> None:
    """The chosen experts' products only (kernels/moe_matvec.wgsl): gate-up, y [T, top_k * I] =
    gelu_tanh(gate_e x) * (up_e x) per choice; down, y [T, D] = sum over choices of route * (down_e x_choice).
    weight holds every expert's rows in one shard (the caller falls back to the dense path otherwise)."""
    if len(weight.shards) != 1:
        raise ValueError(f"{weight.name}: moe_matvec needs the experts in one binding, not {len(weight.shards)}")
    top_k = choice.shape[1]
    n = y.shape[1] if down else y.shape[1] // top_k
    constants = {"WEIGHT_TYPE": weight.type_name, "K": weight.k, "N": n, "TOP_K": top_k, "DOWN": down}
    outputs = y.shape[0] * y.shape[1]
    b.dispatch("moe_matvec", constants, [b.step, weight.shards[0].tensor, x, choice, route, y],
               workgroup_grid(math.ceil(outputs / 64)))


def moe_gelu_mul(b: ProgramBuilder, gate_up: Tensor, weights: Tensor, act: Tensor) -> None:
    """act[:, e*I + j] = gelu_tanh(gate_e) * up_e * weights[:, e] for every expert e
    (kernels/moe_gelu_mul.wgsl); gate_up holds each expert's I gate then I up columns."""
    experts = weights.shape[1]
    width = act.shape[1] // experts
    b.dispatch("moe_gelu_mul", {"I": width, "EXPERTS": experts}, [b.step, gate_up, weights, act],
               workgroup_grid(math.ceil(act.shape[0] * act.shape[1] / ELEMENTWISE_GROUP)))


def gather_rows(b: ProgramBuilder, src: Tensor, out_rows: Tensor, dst: Tensor) -> None:
    """dst[r] = src[out_rows[r]] for the step's n_out output rows, src[r] for dst's other rows
    (kernels/gather_rows.wgsl); rows of any 32-bit type."""
    width = src.numel // src.shape[0]
    if dst.numel // dst.shape[0] != width:
        raise ValueError(f"gather_rows: rows of {src} and {dst} differ")
    b.dispatch("gather_rows", {"WIDTH": width, "ROWS": dst.shape[0]}, [b.step, src, out_rows, dst],
               workgroup_grid(math.ceil(dst.numel / ELEMENTWISE_GROUP)))
