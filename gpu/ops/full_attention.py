"""Host side of full (unmasked) self-attention over a fixed number of rows from fused q | k | v rows
(kernels/attention_full*.wgsl, softmax_rows.wgsl). Activations are f32 row-major [rows, width].
"""

from __future__ import annotations

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor


def full_attention(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                   scale: float) -> None:
    """out = attention of the fused q|k|v rows over all n rows. With n a multiple of 4: scores into an activation
    [heads * n, n] by register tiles, softmax per row in place, then the values by register tiles
    (kernels/attention_full_scores.wgsl, softmax_rows.wgsl, attention_full_values.wgsl; faster than one pass per
    (head, row) on lavapipe); else that one pass (kernels/attention_full.wgsl)."""
    constants = {"N": n, "HEADS": heads, "D": head_dim}
    if n % 4:
        b.dispatch("attention_full", constants | {"SCALE": scale}, [b.step, qkv, out],
                   workgroup_grid(-(-n * heads // 64)))
        return
    scores = b.activation("scores", (heads * n, n))
    blocks = n // 4
    b.dispatch("attention_full_scores", constants | {"SCALE": scale}, [b.step, qkv, scores],
               workgroup_grid(-(-heads * blocks * blocks // 64)))
    b.dispatch("softmax_rows", {"ROWS": heads * n, "N": n}, [b.step, scores], workgroup_grid(heads * n))
    b.dispatch("attention_full_values", constants, [b.step, scores, qkv, out],
               workgroup_grid(-(-heads * blocks * (head_dim // 4) // 64)))
