"""Host side of the per-layer embedding kernels: each layer's own input, from a per-layer token table and a
projection of the embedded tokens, gating a small per-layer projection back into the residual stream.

Each function adds one dispatch to a program and names the kernel file it dispatches; T is the program's maximum
tokens per step, kernels skip rows past the step's n_tokens.
"""

from __future__ import annotations

import math

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels


def combine(b: ProgramBuilder, proj: Tensor, norm_weight: Tensor, tok: Tensor, layers: int, eps: float,
            proj_scale: float) -> None:
    """In place on tok: per token and layer, (rms_norm(proj * proj_scale) * norm_weight + tok) / sqrt(2)
    (kernels/per_layer_inputs.wgsl)."""
    p = norm_weight.numel
    constants = {"P": p, "LAYERS": layers, "EPS": eps, "PROJ_SCALE": proj_scale, "COMBINE": 2.0 ** -0.5}
    b.dispatch("per_layer_inputs", constants, [b.step, proj, norm_weight, tok], workgroup_grid(tok.shape[0] * layers))


def gelu_mul_layer(b: ProgramBuilder, g: Tensor, inputs: Tensor, layer: int, out: Tensor) -> None:
    """out = gelu_tanh(g) * inputs[:, layer * P : (layer + 1) * P] (kernels/gelu_mul_slice.wgsl)."""
    p = g.shape[1]
    constants = {"P": p, "STRIDE": inputs.shape[1], "OFFSET": layer * p}
    b.dispatch("gelu_mul_slice", constants, [b.step, g, inputs, out],
               workgroup_grid(math.ceil(g.shape[0] * p / ELEMENTWISE_GROUP)))
