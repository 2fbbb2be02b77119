"""Host side of Whisper's kernels (gpu/kernels/whisper_*.wgsl, copy_rows.wgsl): each function adds dispatches to a
program. Activations are f32 row-major [T_MAX, width]; kernels process the step's first n_tokens rows (or n_out for
the output-row gathers).
"""

from __future__ import annotations

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

DECODE_CHUNK = 256  # keys per workgroup of whisper_decode_attention.wgsl


def encoder_attention(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                       scale: float) -> None:
    """out = attention of the fused q|k|v rows over all n rows. With n a multiple of 4: scores into an activation
    [heads * n, n] by register tiles, softmax per row in place, then the values by register tiles
    (kernels/whisper_attention_scores.wgsl, whisper_softmax_rows.wgsl, whisper_attention_values.wgsl; faster than
    one pass per (head, row) on lavapipe); else that one pass (kernels/whisper_encoder_attention.wgsl)."""
    constants = {"N": n, "HEADS": heads, "D": head_dim}
    if n % 4:
        b.dispatch("whisper_encoder_attention", constants | {"SCALE": scale}, [b.step, qkv, out],
                   workgroup_grid(-(-n * heads // 64)))
        return
    scores = b.activation("scores", (heads * n, n))
    blocks = n // 4
    b.dispatch("whisper_attention_scores", constants | {"SCALE": scale}, [b.step, qkv, scores],
               workgroup_grid(-(-heads * blocks * blocks // 64)))
    b.dispatch("whisper_softmax_rows", {"ROWS": heads * n, "N": n}, [b.step, scores], workgroup_grid(heads * n))
    b.dispatch("whisper_attention_values", constants, [b.step, scores, qkv, out],
               workgroup_grid(-(-heads * blocks * (head_dim // 4) // 64)))


def decode_attention(b: ProgramBuilder, q: Tensor, k: Tensor, v: Tensor, spans: Tensor, out: Tensor, *, heads: int,
                      head_dim: int, scale: float, max_keys: int, v_offset: int = 0) -> None:
    """out[t, h] = attention of q's row t, head h over the key rows spans[t] of k and v (head h of a row at h *
    head_dim, v's from v_offset): the keys split into chunks of DECODE_CHUNK over workgroups, then merged
    (kernels/whisper_decode_attention.wgsl, whisper_decode_attention_combine.wgsl)."""
    t_max = q.shape[0]
    splits = -(-max_keys // DECODE_CHUNK)
    partial = b.activation("attn_partial", (t_max * heads * splits, head_dim + 2))
    constants = {"HEADS": heads, "D": head_dim, "CHUNK": DECODE_CHUNK, "SPLITS": splits, "SCALE": scale,
                 "Q_STRIDE": q.shape[1], "Q_OFFSET": 0, "K_STRIDE": k.shape[1], "K_OFFSET": 0,
                 "V_STRIDE": v.shape[1], "V_OFFSET": v_offset}
    b.dispatch("whisper_decode_attention", constants, [b.step, q, k, v, spans, partial],
               workgroup_grid(t_max * heads * splits))
    b.dispatch("whisper_decode_attention_combine", {"HEADS": heads, "D": head_dim, "SPLITS": splits},
               [b.step, partial, out], workgroup_grid(-(-t_max * heads * head_dim // 64)))


def residual_add(b: ProgramBuilder, x: Tensor, y: Tensor, bias: Tensor | None) -> None:
    """x += y (+ bias) on the step's rows (kernels/whisper_residual.wgsl)."""
    d = x.shape[1]
    b.dispatch("whisper_residual", {"D": d, "HAS_BIAS": bias is not None}, [b.step, x, y, bias or y],
               workgroup_grid(-(-x.shape[0] * d // 256)))


def copy_rows(b: ProgramBuilder, src: Tensor, pairs: Tensor, dst: Tensor, width: int, *, src_offset: int = 0,
               dst_offset: int = 0, by_out: bool = False) -> None:
    """dst[pairs[r].y, dst_offset:+width] = src[pairs[r].x, src_offset:+width] (kernels/copy_rows.wgsl)."""
    rows = pairs.shape[0]
    constants = {"WIDTH": width, "SRC_STRIDE": src.shape[1], "SRC_OFFSET": src_offset, "DST_STRIDE": dst.shape[1],
                 "DST_OFFSET": dst_offset, "BY_OUT": by_out}
    b.dispatch("copy_rows", constants, [b.step, src, pairs, dst], workgroup_grid(-(-rows * width // 256)))


def logit_summary(b: ProgramBuilder, logits: Tensor, mask: Tensor, params: Tensor, out: Tensor, *, eot: int,
                  timestamp_begin: int) -> None:
    """out[12] = per group of tokens (text, <|endoftext|>, other specials, timestamps [params[0], params[1]]) the
    max logit of row 0 of logits, its token (as u32 bits) and the log-sum-exp, over the tokens mask allows
    (kernels/whisper_logit_summary.wgsl)."""
    vocab = logits.shape[1]
    b.dispatch("whisper_logit_summary", {"V": vocab, "EOT": eot, "TB": timestamp_begin},
               [b.step, logits, mask, params, out], (4, 1, 1))
