"""Host side of the mixture-of-experts kernels: routing tokens to experts and the experts' products.

Each function adds one dispatch to a program and names the kernel file it dispatches; T is the program's maximum
tokens per step, kernels skip rows past the step's n_tokens.
"""

from __future__ import annotations

import math

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels
ROUTE_GROUP = 64  # token rows per workgroup of the router kernel
MATVEC_GROUP = 64  # outputs per workgroup of the expert matvec


def route(b: ProgramBuilder, scores: Tensor, expert_scale: Tensor, weights: Tensor, choice: Tensor,
          routes: Tensor) -> None:
    """The router's choices from its scores [T, E] (softmax, the top_k kept and renormalised, times each
    expert's scale), written two ways: dense weights [T, E] (0 for experts not chosen), and the choices
    choice (u32 [T, top_k]) with their weights routes [T, top_k] (kernels/expert_route.wgsl)."""
    experts, top_k = scores.shape[1], choice.shape[1]
    b.dispatch("expert_route", {"EXPERTS": experts, "TOP_K": top_k},
               [b.step, scores, expert_scale, weights, choice, routes],
               workgroup_grid(math.ceil(scores.shape[0] / ROUTE_GROUP)))


def expert_matvec(b: ProgramBuilder, weight: QuantWeight, x: Tensor, choice: Tensor, routes: Tensor, y: Tensor, *,
                  down: bool) -> None:
    """The chosen experts' products only (kernels/expert_matvec.wgsl): gate-up, y [T, top_k * I] =
    gelu_tanh(gate_e x) * (up_e x) per choice; down, y [T, D] = sum over choices of route * (down_e x_choice).
    weight holds every expert's rows in one shard (the caller falls back to the dense path otherwise)."""
    if len(weight.shards) != 1:
        raise ValueError(f"{weight.name}: the expert matvec needs the experts in one binding, not "
                         f"{len(weight.shards)}")
    top_k = choice.shape[1]
    n = y.shape[1] if down else y.shape[1] // top_k
    constants = {"WEIGHT_TYPE": weight.type_name, "K": weight.k, "N": n, "TOP_K": top_k, "DOWN": down}
    outputs = y.shape[0] * y.shape[1]
    b.dispatch("expert_matvec", constants, [b.step, weight.shards[0].tensor, x, choice, routes, y],
               workgroup_grid(math.ceil(outputs / MATVEC_GROUP)))


def weighted_gelu_mul(b: ProgramBuilder, gate_up: Tensor, weights: Tensor, act: Tensor) -> None:
    """act[:, e*I + j] = gelu_tanh(gate_e) * up_e * weights[:, e] for every expert e
    (kernels/expert_gelu_mul.wgsl); gate_up holds each expert's I gate then I up columns."""
    experts = weights.shape[1]
    width = act.shape[1] // experts
    b.dispatch("expert_gelu_mul", {"I": width, "EXPERTS": experts}, [b.step, gate_up, weights, act],
               workgroup_grid(math.ceil(act.shape[0] * act.shape[1] / ELEMENTWISE_GROUP)))
