"""Host side of full (unmasked) self-attention over a fixed number of rows from fused q | k | v rows
(kernels/attention_full*.wgsl, softmax_rows.wgsl). Activations are f32 row-major [rows, width].
"""

from __future__ import annotations

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

MAX_SCORES_BYTES = 256 << 20  # the scores activation of one group of heads at most (and within the binding limit)


def score_groups(b: ProgramBuilder, n: int, heads: int) -> int:
    """Groups of heads whose n x n scores each fit one binding (and MAX_SCORES_BYTES): the fewest that do."""
    limit = min(MAX_SCORES_BYTES, b.device.limits.max_binding_bytes)
    per_head = 4 * n * n
    if per_head > limit:
        raise ValueError(f"full attention over {n} rows needs {per_head >> 20} MiB of scores per head, more than "
                         f"the {limit >> 20} MiB a binding holds")
    group = min(heads, limit // per_head)
    while heads % group:
        group -= 1
    return heads // group


def full_attention(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                   scale: float) -> None:
    """out = attention of the fused q|k|v rows over all n rows. With n a multiple of 4: scores into an activation
    [group * n, n] by register tiles, softmax per row in place, then the values by register tiles
    (kernels/attention_full_scores.wgsl, softmax_rows.wgsl, attention_full_values.wgsl; faster than one pass per
    (head, row) on lavapipe), for each group of heads whose scores fit one binding (score_groups: all heads at once
    for Whisper's 1500 rows, several groups for the 4096 rows of Gemma 3's vision tower); else one pass
    (kernels/attention_full.wgsl)."""
    constants = {"N": n, "HEADS": heads, "D": head_dim}
    if n % 4:
        b.dispatch("attention_full", constants | {"SCALE": scale}, [b.step, qkv, out],
                   workgroup_grid(-(-n * heads // 64)))
        return
    groups = score_groups(b, n, heads)
    group = heads // groups
    scores = b.activation("scores", (group * n, n))
    blocks = n // 4
    for first in range(0, heads, group):
        part = {"N": n, "HEADS": group, "D": head_dim} | (
            {"ROW_HEADS": heads, "FIRST_HEAD": first} if groups > 1 else {})
        b.dispatch("attention_full_scores", part | {"SCALE": scale}, [b.step, qkv, scores],
                   workgroup_grid(-(-group * blocks * blocks // 64)))
        b.dispatch("softmax_rows", {"ROWS": group * n, "N": n}, [b.step, scores], workgroup_grid(group * n))
        b.dispatch("attention_full_values", part, [b.step, scores, qkv, out],
                   workgroup_grid(-(-group * blocks * (head_dim // 4) // 64)))
