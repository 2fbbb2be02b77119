"""Host side of the quantised matrix kernels: linear layers and embedding lookups over weights
kept on the GPU in their GGUF block format (no dequantisation at load).

Supported weight types: those of gpu.weights.SUPPORTED_TYPES (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), decoded in the shader by kernels/quant/<type>.wgsl.
Shapes: a weight is N rows of K values (GGUF ne = [K, N]); K must be a multiple of the type's
block (32 for Q*_0 / Q*_1, 256 for the K-quants, 16 for the float types, whose kernels read 16
values at a time); N is any. Activations are f32 row-major [T_MAX, width]; kernels compute the
step's first min(n_tokens, T_MAX) rows and leave the others untouched.

Kernels (each weight shard gets its own dispatch, writing its columns of y):
- kernels/matvec.wgsl: decode, up to MATVEC_MAX_TOKENS tokens; threads split each row's K, one
  reduction per row at the end. Entry points: matvec/reduce_subgroup.wgsl where the adapter has
  the "subgroup" feature, matvec/reduce_workgroup.wgsl everywhere, and on software adapters
  matvec/whole_rows.wgsl (four whole rows per thread, no reduction).
- kernels/matvec_q8_0_rows.wgsl: decode of Q8_0 with K a multiple of 64 on software adapters
  (four whole rows per thread, block pairs read as aligned vec4 words).
- kernels/matmul.wgsl: prefill, 64 tokens x 128 rows per workgroup through workgroup memory; on
  software adapters (WHOLE_ROWS) 64 x 64 per workgroup, 8 x 8 per thread, no workgroup memory.
- kernels/get_rows.wgsl: embedding rows (times a scale) for a u32 tensor of token ids.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

GROUP_VALUES = 16  # values per dequant16 call (kernels/quant/bytes.wgsl)
MATVEC_MAX_TOKENS = 4  # up to this many tokens per step, matvec's T_MAX loop beats a 64-token tile
MATMUL_TILE = (64, 128)  # (tokens, rows) per matmul workgroup: TM and TN of kernels/matmul.wgsl
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)
_MATVEC_THREADS = 256  # target threads per matvec workgroup
_MATVEC_MIN_THREADS = 32  # never below one NVIDIA warp
_MATVEC_TARGET_GROUPS = 256  # matvec workgroups wanted before rows per workgroup may grow
_MATVEC_GROUPS_PER_THREAD = 8  # most 16-value groups a matvec thread should take per row
_MATVEC_TARGET_THREADS = 65536  # matvec threads wanted in all (about 500 per H100 SM)
_ROWS_PER_THREAD = 4  # whole-row matvec kernels (software adapters): rows per thread
_SOFTWARE_MIN_GROUPS = 8  # whole-row matvec: workgroups wanted (two to a few CPU cores)


class LinearKernel(Enum):
    """The kernel a linear layer runs; `linear` picks one unless told."""

    MATVEC = "matvec"
    MATMUL = "matmul"


def block_values(qtype: GGMLQuantizationType) -> int:
    """Values per block as the kernels read them: GGML's block, or 16 for the float types."""
    return GROUP_VALUES if qtype in _FLOAT_TYPES else GGML_QUANT_SIZES[qtype][0]


def _check_weight(weight: QuantWeight) -> None:
    bv = block_values(weight.qtype)
    if weight.k % bv:
        raise ValueError(f"{weight.name}: K = {weight.k} is not a multiple of {bv} ({weight.qtype.name} kernels)")


def _check_activation(tensor: Tensor, width: int, t_max: int, what: str) -> None:
    if tensor.dtype != "f32" or len(tensor.shape) != 2 or tensor.shape[1] != width or tensor.shape[0] < t_max:
        raise ValueError(f"{what} {tensor} must be f32 [>= {t_max}, {width}]")


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


class MatvecShape(NamedTuple):
    """How matvec splits a shard: TPR and ROWS of kernels/matvec.wgsl."""

    tpr: int  # threads per row (a power of two)
    rows: int  # rows per workgroup: workgroup size = tpr * rows


def matvec_shape(k: int, n_rows: int) -> MatvecShape:
    """The split of an [n_rows, k] shard over matvec threads (GPU adapters).

    Threads per row, a power of two from 4 up to 64: enough threads in all (n_rows * tpr >=
    _MATVEC_TARGET_THREADS) to hide memory latency, at most eight 16-value groups per thread, at
    least two; measured on an H100: 640 x 262144 Q8_0 best at 4 (106 us), 4096 x 16384 Q4_K at
    32-64 (57 us), 2048 x 640 Q6_K at 64 or 32 rather than 16. Rows per workgroup: 256 threads,
    fewer when that leaves few workgroups.
    """
    groups = k // GROUP_VALUES
    wanted = max(_pow2_ceil(-(-_MATVEC_TARGET_THREADS // n_rows)), _pow2_floor(groups // _MATVEC_GROUPS_PER_THREAD))
    tpr = max(4, min(wanted, 64, _pow2_floor(groups // 2)))
    rows = max(1, _MATVEC_THREADS // tpr)
    while rows > 1 and rows * tpr > _MATVEC_MIN_THREADS and -(-n_rows // rows) < _MATVEC_TARGET_GROUPS:
        rows //= 2
    return MatvecShape(tpr, rows)


def software_matvec_threads(n_rows: int) -> int:
    """Workgroup size of the whole-row matvec kernels (4 rows per thread) for a shard of n_rows:
    64, or fewer (down to one 8-lane SIMD slice) so that small shards still give every CPU core
    workgroups."""
    return max(8, min(64, _pow2_floor(n_rows // (_ROWS_PER_THREAD * _SOFTWARE_MIN_GROUPS))))


def _matvec_dispatch(
    weight: QuantWeight, n_rows: int, subgroups: bool, whole_rows: bool,
) -> tuple[str, dict[str, int | str], int]:
    """(kernel, its extra constants, workgroups) of a matvec over a shard of n_rows."""
    if whole_rows:
        threads = software_matvec_threads(n_rows)
        groups = -(-n_rows // (threads * _ROWS_PER_THREAD))
        if weight.qtype is GGMLQuantizationType.Q8_0 and weight.k % 64 == 0:
            return "matvec_q8_0_rows", {"WG": threads}, groups
        return "matvec", {"ENTRY": "whole_rows", "TPR": 1, "ROWS": threads}, groups
    shape = matvec_shape(weight.k, n_rows)
    entry = "reduce_subgroup" if subgroups else "reduce_workgroup"
    return "matvec", {"ENTRY": entry, "TPR": shape.tpr, "ROWS": shape.rows}, -(-n_rows // shape.rows)


def linear(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor, y: Tensor, t_max: int, *,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
) -> None:
    """y[t, :] = W x[t, :] for the step's first min(n_tokens, t_max) tokens: x [t_max, K] -> y [t_max, N].

    kernel: matvec when t_max <= MATVEC_MAX_TOKENS, else matmul, unless given. subgroups: the
    matvec reduction by subgroup shuffles, by default where the device has the "subgroup" feature.
    whole_rows: matvec and matmul by whole rows per thread (the software adapters' kernels), by
    default on a software adapter; on a GPU the split rows and workgroup-memory tiles are faster.
    """
    _check_weight(weight)
    _check_activation(x, weight.k, t_max, "x")
    _check_activation(y, weight.n, t_max, "y")
    if kernel is None:
        kernel = LinearKernel.MATVEC if t_max <= MATVEC_MAX_TOKENS else LinearKernel.MATMUL
    if subgroups is None:
        subgroups = builder.device.has("subgroup")
    elif subgroups and not builder.device.has("subgroup"):
        raise ValueError(f"{weight.name}: subgroups asked for, but the adapter lacks the feature")
    if whole_rows is None:
        whole_rows = builder.device.is_software
    if kernel is LinearKernel.MATVEC and t_max > MATVEC_MAX_TOKENS:
        raise ValueError(f"{weight.name}: matvec handles at most {MATVEC_MAX_TOKENS} tokens, not {t_max}")
    for shard in weight.shards:
        constants: dict[str, int | str] = {
            "WEIGHT_TYPE": weight.type_name, "K": weight.k, "N_ROWS": shard.n_rows,
            "ROW_START": shard.row_start, "Y_STRIDE": weight.n, "T_MAX": t_max,
        }
        name = kernel.value
        if kernel is LinearKernel.MATVEC:
            name, extra, groups = _matvec_dispatch(weight, shard.n_rows, subgroups, whole_rows)
            if name != "matvec":
                del constants["WEIGHT_TYPE"]
            constants |= extra
        elif whole_rows:
            constants |= {"WHOLE_ROWS": 1, "WG": 64}
            groups = -(-shard.n_rows // 64) * -(-t_max // 64)
        else:
            tokens, rows = MATMUL_TILE
            groups = -(-shard.n_rows // rows) * -(-t_max // tokens)
        builder.dispatch(name, constants, [builder.step, shard.tensor, x, y], workgroup_grid(groups))


def embedding(
    builder: ProgramBuilder, weight: QuantWeight, ids: Tensor, out: Tensor, t_max: int, scale: float = 1.0, *,
    rows: Tensor | None = None, slot_tokens: Tensor | None = None,
) -> None:
    """out[t, :] = W[ids[t], :] * scale for the step's first min(n_tokens, t_max) tokens (kernels/get_rows.wgsl).

    ids: u32 [>= t_max]; out: f32 [>= t_max, K]. An id outside [0, N) leaves its row of out as it was.
    rows and slot_tokens (given together): the row table and the per-sequence last sampled tokens;
    a row marked as decoding (rows[t].z == 1) then takes its id from slot_tokens[rows[t].y].
    """
    _check_weight(weight)
    _check_activation(out, weight.k, t_max, "out")
    if ids.dtype != "u32" or ids.numel < t_max:
        raise ValueError(f"ids {ids} must be u32 with at least {t_max} values")
    if (rows is None) != (slot_tokens is None):
        raise ValueError("rows and slot_tokens go together")
    for shard in weight.shards:
        constants = {
            "WEIGHT_TYPE": weight.type_name, "K": weight.k, "N_ROWS": shard.n_rows,
            "ROW_START": shard.row_start, "T_MAX": t_max, "SCALE": scale, "TOKEN_SOURCE": rows is not None,
        }
        # without a token source the two extra bindings are not read: ids stands in for both
        tensors = [builder.step, ids, shard.tensor, out, rows or ids, slot_tokens or ids]
        builder.dispatch("get_rows", constants, tensors, workgroup_grid(t_max))
