"""Host side of the quantised matrix kernels: linear layers (plain, and the fused gate-up GLU of
Gemma's feed-forward) and embedding lookups over weights kept on the GPU in their GGUF block format
(no dequantisation at load).

Supported weight types: those of gpu.weights.SUPPORTED_TYPES (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), decoded in the shader by kernels/quant/<type>.wgsl.
Shapes: a weight is N rows of K values (GGUF ne = [K, N]); K must be a multiple of the type's
block (32 for Q*_0 / Q*_1, 256 for the K-quants, 16 for the float types, whose kernels read 16
values at a time); N is any. Activations are f32 row-major [T_MAX, width]; kernels compute the
step's first min(n_tokens, T_MAX) rows and leave the others untouched.

Kernels (each weight shard gets its own dispatch, writing its columns of y, or two for a matmul
split over k; each takes GLU = 1, the fused gate-up linear, which reads gate row r and up row F + r
and stores gelu_tanh(g) * u):
- kernels/matvec.wgsl: decode, up to MATVEC_MAX_TOKENS tokens (SOFTWARE_MATVEC_MAX_TOKENS on software
  adapters: more take the whole-row matmul); threads split each row's K, one
  reduction per row at the end. Entry points: matvec/reduce_subgroup.wgsl where the adapter has
  the "subgroup" feature, matvec/reduce_workgroup.wgsl everywhere, and on software adapters
  matvec/whole_rows.wgsl (four whole rows per thread, no reduction). Steps of several tokens (batched decode)
  interleave a workgroup's rows thread by thread (INTERLEAVE, row_interleave) so that neighbouring threads share
  their loads of x, and the Q4_K kernel takes a row's lanes along each block's quant words (LANE_WORDS).
- kernels/matvec_q8_0_rows.wgsl: decode of Q8_0 with K a multiple of 64 on software adapters
  (four whole rows per thread, block pairs read as aligned vec4 words).
- kernels/matmul.wgsl: prefill. On GPUs matmul/tiles.wgsl: register tiles (4 or 8 tokens x 4 or 8 rows
  per thread) fed through workgroup memory in f32 (f16 tiles, where the adapter has "shader-f16",
  are tested but off: slower on an H200, see F16_TILES), the tile and k split picked by
  `matmul_tile`; a split's parts are added by kernels/matmul_reduce.wgsl. On software adapters
  matmul/whole_rows.wgsl: 64 rows x 64 tokens per workgroup, 8 x 8 per thread (fewer tokens for shorter steps),
  no workgroup memory.
  Where the executor asks for int8 matmuls (Executor(int8_matmuls=True); a model's `int8_activations`
  setting) and the weight type has an int8 unpacker (INT8_TYPES), the GPU tiles run in 8-bit integers
  instead (matmul/tiles_i8.wgsl, dot4I8Packed), on the input quantised per 32 values by
  kernels/quantize_q8.wgsl once per linear (`Int8Input`), or by the residual norm before it (a
  QuantisedActivation, quantises_prompt_input): 1.4x (270M) to 1.8x (4B) faster prompts on an H100, with
  llama.cpp's numerics (its matmuls quantise activations alike) rather than Hearth's exact-parity bound.
  With int8 matmuls, decode matvecs whose shape pays for it (int8_matvec_pays: output heads, large Q4_K linears
  without GLU) run kernels/matvec_q4_k_i8.wgsl / matvec_q6_k_i8.wgsl: each workgroup quantises its input as
  quantize_q8 does (matvec/q8_input.wgsl), then dot4I8Packed; and a model may keep an activation quantised
  between two dispatches (gpu/ops/quantised.py QuantisedActivation, quantised_input_pays): a matvec's epilogue
  writes it (matvec/store_q8.wgsl), an int8 matvec reads it (matvec/x_q8_buffer.wgsl).
- kernels/get_rows.wgsl: embedding rows (times a scale) for a u32 tensor of token ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gpu.device import Device
from gpu.ops.quantised import QuantisedActivation, quantised_activation  # noqa: F401 (re-exported)
from gpu.ops.split_sums import SplitSums
from gpu.ops.transformer import gelu_mul
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

GROUP_VALUES = 16  # values per dequant16 call (kernels/quant/bytes.wgsl)
# Up to this many tokens per step, matvec's per-token loop over one read of the weights beats a 64-token tile:
# on an H100, 8 concurrent decode streams went 2,037 -> 2,642 tok/s (270M) and 763 -> 1,065 (1B) from 4 to 8;
# 16 was slower than the tiles (bench/gpu.py --matvec-max-tokens). The matvec kernels write their token loops out
# for at most 8 tokens (kernels/matvec/constants.wgsl asserts T_MAX <= 8).
MATVEC_MAX_TOKENS = 8
# The whole-row kernels (software adapters: lavapipe) take steps of several tokens as a matmul (matmul/whole_rows.wgsl,
# 8 rows x up to 8 tokens a thread), whose time grows slowly with the tokens, where the whole-row matvec's grows
# with each. lavapipe on 2 cores, the 270M's decode step of 1 / 2 / 4 / 8 sequences (median of 8 steps), s: matvec
# 0.13 / 0.84 / 1.51 / 1.68, matmul 0.17 / 0.25 / 0.37 from 2 on (8 sequences: 21.9 tok/s against 4.8).
SOFTWARE_MATVEC_MAX_TOKENS = 1
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)
_MATVEC_THREADS = 256  # target threads per matvec workgroup
_MATVEC_MIN_THREADS = 32  # never below one NVIDIA warp
_MATVEC_TARGET_GROUPS = 256  # matvec workgroups wanted before rows per workgroup may grow
# ... for the wide K-quant matvecs on a plain input, whose workgroups have no prologue to repeat (see
# wide_matvec_shape)
_WIDE_TARGET_GROUPS = 512
_MATVEC_GROUPS_PER_THREAD = 8  # most 16-value groups a matvec thread should take per row
_MATVEC_TARGET_THREADS = 65536  # matvec threads wanted in all (about 500 per H100 SM)
_HEAD_ROWS = 65536  # a matvec reading this many rows (an output head) takes _HEAD_TPR threads a row
_HEAD_TPR = 4
_ROWS_PER_THREAD = 4  # whole-row matvec kernels (software adapters): rows per thread
_SOFTWARE_MIN_GROUPS = 8  # whole-row matvec: workgroups wanted (two to a few CPU cores)
# K-quant matvecs through kernels of their own that take 32 values per load step and apply scales per
# sub-block (GPU adapters), rather than matvec.wgsl's 16-value dequant16; bench/kernels.py times both.
WIDE_MATVEC_KERNELS = {GGMLQuantizationType.Q4_K: "matvec_q4_k", GGMLQuantizationType.Q6_K: "matvec_q6_k"}
WIDE_MATVEC = True
# The matvec kernels that implement PAIRS (threads taking two rows on one load of x, see row_pairs_shape), and
# the switch (benchmarks).
ROW_PAIRS_KERNELS = {"matvec_q4_k", "matvec_q6_k"}
ROW_PAIRS = True
ROW_PAIRS_MIN_K = 6144  # rows at least this long (Gemma's down projections)
_MULTI_TOKEN_PAIR_TPR = 32  # steps of several tokens: threads a row of paired rows, at least
# Steps of at least this many tokens run the Q4_K matvec with a row's lanes along each block's quant words
# (LANE_WORDS, matvec/q4_k_words.wgsl) in workgroups of _WORD_LANES_THREADS: 64 threads a row (rows in pairs where
# row_pairs_shape pairs them), 32 with GLU, the fastest of 9 splits each at 8 tokens. H200, the 4B's Q4_K shapes
# (bench/kernels.py, us, lanes along 16-byte units -> along words): 4 tokens q 2560 x 2048 13.7 -> 10.8, o 11.5 ->
# 10.0, gate-up 72.3 -> 54.4, down 43.4 -> 32.5; 8 tokens 19.0 -> 16.3, 17.2 -> 14.8, 86.5 -> 81.2, 64.4 -> 49.0;
# 2 tokens not (gate-up 35.8 -> 43.8, down 23.9 -> 25.0). The 4B's batched decode (bench/tree_ab.py, interleaved
# twice, tok/s): 4 streams 595.0 / 594.8 -> 676.2 / 680.5, 8 streams 753.3 / 755.7 -> 855.1 / 858.2 (the 1B, whose
# only K-quant rows are its down projections, 1,720 either way at 8).
Q4_WORD_LANES_MIN_TOKENS = 4
_WORD_LANES_THREADS = 128
# Steps of at least this many tokens interleave the rows of the other f32 matvecs' workgroups thread by thread
# (INTERLEAVE in kernels/matvec/constants.wgsl), up to ROW_INTERLEAVE rows (a power of two dividing the workgroup's
# rows: row_interleave). H200, 8 tokens (bench/kernels.py, us, consecutive -> interleaved): the 1B's q 1152 x 1024
# Q8_0 11.2 -> 10.5, o 1024 x 1152 11.1 -> 8.8, gate-up 1152 x 2 x 6912 Q8_0 52.2 -> 40.5, Q5_0 53.6 -> 34.0; the
# 4B's Q6_K gate-up 106.5 -> 86.5, down 58.7 -> 53.7, q 18.9 -> 19.3, o 14.9 -> 15.2. Batched decode (bench/tree_ab.py,
# tok/s): the 1B 4 streams 1,366 -> 1,537, 8 streams 1,720 -> 2,078; the 270M 2,615 -> 2,756 and 4,250 -> 4,625; the
# 4B (Q4_K on word lanes) 676 -> 687 and 857 -> 875.
INTERLEAVE_MIN_TOKENS = 4
ROW_INTERLEAVE = 8


# Weight types whose GPU matmuls can run in 8-bit integers (kernels/quant_i8/<type>.wgsl unpack their blocks):
# on an H100 dot4I8Packed ran 120 T int8 operations/s against 43 TFLOP/s of f32 fma.
INT8_TYPES = frozenset({GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q5_0,
                        GGMLQuantizationType.Q8_0})
# Decode matvecs in 8-bit integers (where the executor asks for int8 matmuls): the wide K-quant kernels on an input
# each workgroup quantises for itself (kernels/matvec/q8_input.wgsl, workgroup memory of Q8_INPUT_BYTES at most).
INT8_MATVEC_KERNELS = {GGMLQuantizationType.Q4_K: "matvec_q4_k_i8", GGMLQuantizationType.Q6_K: "matvec_q6_k_i8"}
Q8_INPUT_BYTES = 16 << 10
# Q4_K matvecs without GLU take the int8 kernel for rows of at most INT8_MATVEC_MAX_K values and matrices of at
# least INT8_MATVEC_MIN_VALUES (int8_matvec_pays); quantised inputs pay from that size too (quantised_input_pays)
INT8_MATVEC_MAX_K = 4096
INT8_MATVEC_MIN_VALUES = 4 << 20


@dataclass(frozen=True)
class Int8Input:
    """A matmul's input quantised per 32 values (kernels/quantize_q8.wgsl) for matmul/tiles_i8.wgsl."""

    q: Tensor  # u32 [t_max, K / 4]: four int8 to a word
    scales: Tensor  # f32 [t_max, K / 16]: (d, exact sum) per 32 values


def quantize_input(builder: ProgramBuilder, x: Tensor, t_max: int) -> Int8Input:
    """x [t_max, K] (K a multiple of 32) as int8 per 32 values with their scales and sums."""
    k = x.shape[1]
    if k % 32:
        raise ValueError(f"{x}: int8 quantisation needs rows of a multiple of 32 values, not {k}")
    q = builder.activation(f"{x.name}.q8", (t_max, k // 4), "u32")
    scales = builder.activation(f"{x.name}.q8_scales", (t_max, k // 16))
    builder.dispatch("quantize_q8", {"K": k, "T_MAX": t_max}, [builder.step, x, q, scales],
                     workgroup_grid(-(-t_max * (k // 32) // 64)))
    return Int8Input(q, scales)


def quantised_input_pays(weight: QuantWeight, t_max: int) -> bool:
    """Whether a QuantisedActivation input pays for a decode matvec of this weight (quantises_ffn_input,
    quantises_glu_output): an INT8_MATVEC_KERNELS matrix of at least INT8_MATVEC_MIN_VALUES. On an H100, one
    token, f32 -> int8 on a quantised input in us: the 4B's Q4_K gate-up 32.5 (normalised in its prologue) ->
    18.1 (19.8 writing its output quantised) after a quantising residual norm of 9.5 (8.2 in f32); its downs
    Q4_K 23.0 -> 11.2, Q6_K 18.5 -> 15.0; the 1B's 12.4 -> 10.0 and 15.5 -> 14.2."""
    return (weight.qtype in INT8_MATVEC_KERNELS and t_max <= MATVEC_MAX_TOKENS
            and weight.k * weight.n >= INT8_MATVEC_MIN_VALUES)


def _int8_glu_matvec(builder: ProgramBuilder, gate_up: QuantWeight) -> bool:
    """Whether a program may keep a gate-up's input or output quantised at all: the executor asks for int8
    matmuls, the adapter is a GPU, and the gate-up is one shard (one GLU dispatch)."""
    return builder.executor.int8_matmuls and not builder.device.is_software and len(gate_up.shards) == 1


def quantises_ffn_input(builder: ProgramBuilder, gate_up: QuantWeight, t_max: int) -> bool:
    """Whether a step's feed-forward input should be a QuantisedActivation written by its residual_norm dispatch
    (kernels/residual_norm_q8.wgsl) rather than an f32 one: where the executor asks for int8 matmuls, on a GPU, for
    decode matvecs, a one-shard gate-up for which quantised_input_pays, of a width that is a multiple of 64.
    (Normalising and quantising in every workgroup of an int8 gate-up instead took 37.5 us on an H200 for the
    4B's.) Where the model would rather fold the norm into an f32 gate-up's prologue (NormedInput, folds_norms),
    the fold is faster: H200, Gemma 3 4B decode under int8 activations 312-314 -> 317-320 tok/s; Gemma 4, whose
    residual norms are dispatches of their own, gains from it (E2B's shapes 261 -> 275, both with the int8 down)."""
    return _int8_glu_matvec(builder, gate_up) and gate_up.k % 64 == 0 and quantised_input_pays(gate_up, t_max)


def quantises_glu_output(builder: ProgramBuilder, gate_up: QuantWeight, down: QuantWeight, t_max: int,
                         normed_input: bool = False) -> bool:
    """Whether a step's gate-up should write its output as a QuantisedActivation for an int8 down projection:
    where the executor asks for int8 matmuls, on a GPU, for decode matvecs (at most MATVEC_MAX_TOKENS tokens),
    a one-shard gate-up of a width that is a multiple of 64, and a down projection for which quantised_input_pays;
    not where the gate-up normalises its input (normed_input: a NormedInput) in the wide K-quant kernel at a split
    of other than whole 32-row blocks, which a quantised output needs (matvec/store_q8.wgsl): there the split lost
    costs what the int8 down saves (H200, Gemma 3 4B's gate-up at 40 rows a workgroup, 1,105 us a step in-pass,
    at 32 with the quantised output 1,278; its downs 726 -> 553; decode 317-320 -> 322-324 tok/s without)."""
    if not (_int8_glu_matvec(builder, gate_up) and (gate_up.n // 2) % 64 == 0 and down.k == gate_up.n // 2
            and quantised_input_pays(down, t_max)):
        return False
    return not (normed_input and _wide_normed_rows(builder, gate_up, t_max) % 32)


def _wide_normed_rows(builder: ProgramBuilder, gate_up: QuantWeight, t_max: int) -> int:
    """Rows a workgroup of the gate-up's matvec on a NormedInput with an f32 output (_matvec_dispatch's split) where
    it runs the wide K-quant kernel, else 32 (the other kernels' splits take the quantised output's blocks at no
    cost measured: the 1B's Q5_0 gate-up with an int8 down 536 -> 549 tok/s)."""
    plan = _plan(builder, gate_up, t_max, None, None, None)
    name, extra, _ = _matvec_dispatch(gate_up, gate_up.n // 2, plan.subgroups, plan.whole_rows, True, t_max,
                                      _int8_matvec(gate_up, plan, t_max, True), normed=True,
                                      max_threads=_any_size_threads(builder, plan))
    return int(extra["ROWS"]) if name in WIDE_MATVEC_KERNELS.values() else 32


def int8_tile(k: int, n_cols: int, t_max: int, glu: bool = False) -> MatmulTile | None:
    """The tile of matmul/tiles_i8.wgsl (4 tokens x 8 rows a thread, 32-value chunks; 128 x 128 tiles of 512
    threads measured slower, see the README), or None where it has no tile: steps of up to 32 tokens, whose
    tiles have too few threads for a load per row and token.

    The int8 tiles split k less than the f32 ones: only where the tiles alone make fewer than _INT8_FEW_GROUPS
    workgroups, then until there are _INT8_SPLIT_GROUPS. Measured on an H100 (.bench/s9_tiles.py, 4B shapes at
    512 tokens, 128 x 64 tiles, us): q|k|v 2560 x 4096 230 unsplit against 312 in 8 parts (matmul_tile's
    split), o 2048 x 2560 158 in 4 parts against 181 in 8 and 176 in 2, Q4_K down 10240 x 2560 657 in 4
    against 668 in 8 (Q6_K 585 against 599). At 512 tokens the 270M's and 1B's shapes keep matmul_tile's splits;
    at other token counts some of them split less (not measured there)."""
    if t_max <= 32:
        return None
    tile = _four_token_tile(n_cols, t_max, glu)._replace(thread_rows=8, k_chunk=32)
    groups = tile.groups(n_cols, t_max, glu)
    split = 1
    if not glu and groups < _INT8_FEW_GROUPS:
        while (groups * split < _INT8_SPLIT_GROUPS and split < _MATMUL_MAX_SPLIT and k % (64 * split) == 0
               and k // (2 * split) >= _MATMUL_PART and 2 * split * t_max * n_cols * 4 <= _MATMUL_MAX_PARTS_BYTES):
            split *= 2
    return tile._replace(split=split)


def quantises_prompt_input(builder: ProgramBuilder, weights: list[QuantWeight], t_max: int) -> bool:
    """Whether a step's input to these linears (each reading all of it) should be a QuantisedActivation written by
    the residual norm before them (kernels/residual_norm_q8.wgsl) rather than an f32 activation that each linear
    quantises with a quantize_q8 dispatch of its own: where each of them runs the int8 tiles (_uses_int8: int8
    matmuls asked for, a GPU, an INT8_TYPES weight, a step of more than 32 tokens) on rows of a multiple of 64
    values. The tiles then read the same q, d and sums as quantize_q8 would have made (common/q8_block.wgsl)."""
    if any(w.k != weights[0].k for w in weights) or weights[0].k % 64:
        return False
    return all(_uses_int8(w, _plan(builder, w, t_max, None, None, None), t_max, w.n, False) for w in weights)


def _uses_int8(weight: QuantWeight, plan: "_Plan", t_max: int, n_cols: int, glu: bool) -> bool:
    """Whether a linear runs matmul/tiles_i8.wgsl: a tiled matmul the plan allows int8 for, of an INT8_TYPES
    weight, with a tile for its shape."""
    return (plan.int8 and plan.kernel is LinearKernel.MATMUL and not plan.whole_rows
            and weight.qtype in INT8_TYPES and int8_tile(weight.k, n_cols, t_max, glu) is not None)


# Largest normalised input a matvec workgroup computes for itself (matvec/x_normed.wgsl): T_MAX x K f32 in
# workgroup memory, beside the reduction's; 16 KiB leaves room under lavapipe's 32 KiB.
NORMED_INPUT_BYTES = 16 << 10


@dataclass(frozen=True)
class NormedInput:
    """A linear's input made inside its matvec (matvec/x_normed.wgsl) rather than by a residual_norm dispatch:
        r = residual + rms_norm(block_out) * post_weight       (written to residual_out)
        x = rms_norm(r) * next_weight                            (the linear's input)
    residual_out must be another tensor than residual: the matvec's other workgroups still read it."""

    block_out: Tensor
    post_weight: Tensor
    residual: Tensor
    next_weight: Tensor
    residual_out: Tensor
    eps: float


def _normed_input_fits(width: int, t_max: int) -> bool:
    return t_max <= MATVEC_MAX_TOKENS and width % 4 == 0 and t_max * width * 4 <= NORMED_INPUT_BYTES


def _check_normed_input(weight: QuantWeight, t_max: int) -> None:
    if not _normed_input_fits(weight.k, t_max):
        raise ValueError(f"{weight.name}: a normalised input needs a GPU matvec of at most "
                         f"{NORMED_INPUT_BYTES} bytes of input (see folds_norms)")


def _normed_bindings(x: NormedInput, y: Tensor) -> list[Tensor]:
    """A matvec's bindings 2 to 7 on a NormedInput (matvec/normed_input.wgsl's, y at 3), after the step and the
    weight."""
    return [x.block_out, y, x.residual, x.post_weight, x.next_weight, x.residual_out]


def folds_norms(builder: ProgramBuilder, width: int, t_max: int) -> bool:
    """Whether linears of this program take a NormedInput of this width by default: matvecs of few tokens on a GPU
    (software adapters run whole-row matvecs, which read x directly)."""
    return not builder.device.is_software and _normed_input_fits(width, t_max)


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


def matvec_shape(k: int, n_rows: int, unit_values: int = GROUP_VALUES,
                 units_per_thread: int = _MATVEC_GROUPS_PER_THREAD, rows_read: int | None = None,
                 target_groups: int = _MATVEC_TARGET_GROUPS) -> MatvecShape:
    """The split of an [n_rows, k] shard over matvec threads (GPU adapters).

    Threads per row, a power of two from 4 up to 64: enough threads in all (rows_read * tpr >=
    _MATVEC_TARGET_THREADS; rows_read counts a GLU's up rows too) to hide memory latency, at most
    units_per_thread units of unit_values values per thread, at least two; measured on an H100: 640 x
    262144 Q8_0 best at 4 (106 us), 4096 x 16384 Q4_K at 32-64 (57 us), 2048 x 640 Q6_K at 64 or 32
    rather than 16. Output heads (rows_read >= _HEAD_ROWS: the rows alone give threads enough) take _HEAD_TPR
    threads a row, long runs of units each: on an H200 the 1B's Q8_0 head (1152 x 262144) 180-186 us at 2-4
    threads a row against 225 at 8, the 4B's Q6_K head 314 us at 4 (322 at 16; 252 against 378 in int8), the
    270M's 98 us at 4 as at 2. Rows per workgroup: 256 threads, fewer while that leaves fewer than target_groups
    workgroups.
    """
    units = k // unit_values
    rows_read = rows_read or n_rows
    wanted = max(_pow2_ceil(-(-_MATVEC_TARGET_THREADS // rows_read)), _pow2_floor(units // units_per_thread))
    if rows_read >= _HEAD_ROWS:
        wanted = _HEAD_TPR
    tpr = max(4, min(wanted, 64, _pow2_floor(units // 2)))
    rows = max(1, _MATVEC_THREADS // tpr)
    while rows > 1 and rows * tpr > _MATVEC_MIN_THREADS and -(-n_rows // rows) < target_groups:
        rows //= 2
    return MatvecShape(tpr, rows)


def wide_matvec_shape(k: int, n_rows: int, qtype: GGMLQuantizationType, glu: bool, t_max: int,
                      normed: bool = False, max_threads: int = 0) -> MatvecShape:
    """matvec_shape for matvec_q4_k.wgsl and matvec_q6_k.wgsl (32-value units). Units per thread from a sweep of
    threads per row on an H100 (bench/kernels.py --wide-sweep, Gemma 3 4B shapes): Q4_K fastest with up to 16
    units a thread (down 10240 x 2560 at 32 threads a row), Q6_K with 4, its units costing more loads (gate-up
    at 16 threads a row, down at 64). A one-token Q4_K gate-up takes 8 (2560 x 2 x 10240 at 8 threads a row:
    29.1 us against 31.4 at 4, 32.6 against 36.6 with a normalised input; H200, every split in one run;
    batched decode was not swept, so it keeps 16).

    On a plain input the rows per workgroup shrink until there are _WIDE_TARGET_GROUPS workgroups rather than
    _MATVEC_TARGET_GROUPS: on an H200 at one token (bench/kernels.py, in us, 320 -> 640 workgroups) the 4B's o
    2048 x 2560 7.5 -> 6.9, its Q4_K down (rows in pairs) 16.9 -> 15.4, its gate-up on a plain input 28.3 -> 24.9;
    q|k|v 2560 x 4096 10.1 either way (256 or 512). Not on a normalised input (normed), whose every workgroup
    makes the input again: the gate-up 30.9 -> 32.0 at 640 workgroups (46.5 at 1,280). There, where the
    reduction takes workgroups of any size (max_threads), as many rows a workgroup as leave
    _MATVEC_TARGET_GROUPS workgroups, about two an SM of an H100 or H200 (132): the 4B's gate-up at 8 threads
    a row and 40 rows, 256 workgroups of 320 threads, rather than 32 rows, 320 workgroups, of which a third
    of the SMs ran three: in-pass on an H200 30.9 -> 26.6 us (8 x 20: 28.7, 8 x 80: 27.5, 4 x 40: 30.8);
    4B decode 302.2 / 303.4 -> 317.3 / 317.5 tok/s, after 512 tokens 295.9 / 297.6 -> 309.4 / 309.6
    (512 workgroups of 20 rows: 303.6 and 296.5)."""
    if qtype is GGMLQuantizationType.Q4_K:
        per_thread = 8 if glu and t_max == 1 else 16
    else:
        per_thread = 4
    shape = matvec_shape(k, n_rows, 32, per_thread, rows_read=n_rows * (2 if glu else 1),
                         target_groups=_MATVEC_TARGET_GROUPS if normed else _WIDE_TARGET_GROUPS)
    if normed:
        # as many rows a workgroup as leave _MATVEC_TARGET_GROUPS workgroups, not a power of two where need be,
        # up to max_threads a workgroup (0 where the reduction needs a power of two): the 4B's gate-up 40 rows
        rows = -(-n_rows // _MATVEC_TARGET_GROUPS)
        if shape.rows < rows <= max_threads // shape.tpr:
            shape = MatvecShape(shape.tpr, rows)
    return shape


def row_pairs_shape(weight: QuantWeight, t_max: int, shape: MatvecShape) -> MatvecShape | None:
    """The split of a ROW_PAIRS_KERNELS matvec (no GLU, f32 output) whose threads each take two rows, ROWS apart,
    on the same loads of x (PAIRS in kernels/matvec/constants.wgsl), or None where single rows are faster. A unit
    of 32 values costs 8 vec4 loads of x against one of the weight, so on long rows the loads of x bound it;
    the pairs take twice the threads a row (up to 64) and half the rows a workgroup. Measured on an H100
    (bench/kernels.py, one run, in us, single rows -> pairs): the 4B's Q4_K down 10240 x 2560 22.9 -> 18.5 at
    one token, 140.8 -> 99.4 at 8; the 1B's 6912 x 1152 (already at 64 threads a row) 11.0 -> 11.5 at one
    token, 56.6 -> 46.7 at 8; shorter rows slower: q 2560 x 2048 7.9 -> 8.8, o 2048 x 2560 8.0 -> 8.6. End to
    end on the 4B's shapes (bench/gpu.py, against the tree before in one call): decode 266 -> 273 tok/s, after
    512 tokens 262 -> 268, 8 streams 449 -> 467. Not for GLU: a gate-up thread on two gate rows and their up rows
    measured slower at every split (H100, 4B 2560 x 2 x 10240: one token 29.6 -> 32.4 us, 8 tokens 159 -> 212).
    Output heads (at least _HEAD_ROWS rows) too, at any K: on an H200, one token, 2560 x 262208 Q6_K 313 -> 278
    us (4 threads a row -> pairs at 8; 275 at 8 with half the rows a workgroup, 280 at 4), Q4_K 250 -> 220 (at 4).
    The Q6_K down 10240 x 2560 at 64 threads a row: 8 tokens 120 -> 111, one token 18.3 -> 17.6 (not taken: the
    1B's 6912 x 1152 10.1 -> 10.4).

    Steps of several tokens (batched decode) pair rows at every K (output heads as above), a thread's loads of x
    serving its two rows for every token, at _MULTI_TOKEN_PAIR_TPR threads a row or more and half the rows a
    workgroup. H200, 8 tokens, bench/kernels.py, us, single rows -> this rule's pairs: the 4B's Q4_K q 2560 x 2048
    27.1 -> 19.0, o 2048 x 2560 26.5 -> 17.2, down 10240 x 2560 75.5 (pairs at 64 threads, the one-token form) ->
    64.4; Q6_K o 16.9 -> 14.9. In the model (bench/gpu.py's batched decode of the synthetic 4B and 1B, H200, against the rule before,
    interleaved in one call, tok/s): 4 streams 4B 570.1 / 571.1 -> 595.0 / 594.9, 1B 1,375.5 / 1,365.2 -> 1,380.6
    / 1,395.2; 8 streams 4B 740.0 / 742.0 -> 754.3 / 754.0, 1B 1,690.3 / 1,696.8 -> 1,723.2 / 1,726.4. Measured
    beside it at 8 streams (another call, the rule before at 4B 742.7 / 741.7 and 1B 1,701.3 / 1,700.1): pairs at
    twice the threads a row (the one-token form) 4B 736.7, 1B 1,733.5; at the same threads a row 4B 767.1, 1B
    1,629.7 (the 1B's 16-thread rows left workgroups of one pair)."""
    if not ROW_PAIRS:
        return None
    if t_max > 1 and weight.n < _HEAD_ROWS:
        return MatvecShape(max(_MULTI_TOKEN_PAIR_TPR, shape.tpr), max(1, shape.rows // 2))
    if weight.k < ROW_PAIRS_MIN_K and weight.n < _HEAD_ROWS:
        return None
    if t_max == 1 and shape.tpr >= 64:
        return None
    return MatvecShape(min(64, 2 * shape.tpr), max(1, shape.rows // 2))


def word_lanes_shape(glu: bool) -> MatvecShape:
    """The split of a Q4_K matvec with its lanes along each block's 32 quant words (steps of Q4_WORD_LANES_MIN_TOKENS
    or more): it replaces wide_matvec_shape's and row_pairs_shape's threads a row and rows, not the pairing."""
    tpr = 32 if glu else 64
    return MatvecShape(tpr, _WORD_LANES_THREADS // tpr)


def row_interleave(rows: int) -> int:
    """Rows a matvec workgroup of `rows` rows (row slots, with PAIRS) interleaves thread by thread: the largest power
    of two up to ROW_INTERLEAVE dividing it."""
    interleave = 1
    while interleave < ROW_INTERLEAVE and rows % (2 * interleave) == 0:
        interleave *= 2
    return interleave


def int8_matvec_shape(k: int, n_rows: int, glu: bool) -> MatvecShape:
    """matvec_shape for the int8 matvecs (INT8_MATVEC_KERNELS, 32-value units): up to 4 units a thread, their
    arithmetic being light (H200, Gemma 3 4B shapes, the input quantised beforehand: Q4_K gate-up 2560 x 2 x
    10240 best at 16 threads a row, down 10240 x 2560 at 64 (10.7 us against 23.1 in f32), o 2048 x 2560 at 32,
    Q6_K down at 64, v 2560 x 1024 at 64)."""
    return matvec_shape(k, n_rows, 32, 4, rows_read=n_rows * (2 if glu else 1))


def software_matvec_threads(n_rows: int) -> int:
    """Workgroup size of the whole-row matvec kernels (4 rows per thread) for a shard of n_rows:
    64, or fewer (down to one 8-lane SIMD slice) so that small shards still give every CPU core
    workgroups."""
    return max(8, min(64, _pow2_floor(n_rows // (_ROWS_PER_THREAD * _SOFTWARE_MIN_GROUPS))))


class MatmulTile(NamedTuple):
    """How the GPU matmul (kernels/matmul/tiles.wgsl) splits a dispatch: BT, BR, RR, BK, SPLIT and TT."""

    tokens: int  # tokens per workgroup (BT), a multiple of TT
    rows: int  # weight rows per workgroup (BR); with GLU, half gate rows and their up rows
    thread_rows: int  # weight rows per thread (RR): 4, or 8 (the GLU needs 8)
    k_chunk: int  # k values per workgroup-memory chunk (BK): 16 or 32 (tiles.wgsl's steps are written out)
    split: int = 1  # workgroups sharing a tile's k range (SPLIT), their parts added by matmul_reduce
    thread_tokens: int = 4  # tokens per thread (TT): 4, or 8 (f32 tiles only; tiles_i8 takes 4)

    @property
    def threads(self) -> int:
        return (self.tokens // self.thread_tokens) * (self.rows // self.thread_rows)

    def storage_bytes(self, f16: bool) -> int:
        """Workgroup memory of the x and weight tiles (x's k quads padded by 128 / BK values each, 32 in all)."""
        return (self.k_chunk * (self.tokens + self.rows) + 32) * (2 if f16 else 4)

    def problem(self, k: int, glu: bool) -> str | None:
        """Why the kernel cannot take this tile for rows of k values, or None."""
        if self.thread_rows not in (4, 8) or (glu and self.thread_rows != 8):
            return "4 or 8 rows per thread (8 with GLU)"
        if self.thread_tokens not in (4, 8):
            return "4 or 8 tokens per thread"
        if self.tokens % self.thread_tokens:
            return "tokens a multiple of TT"
        if self.rows % (4 * self.thread_rows) or self.k_chunk not in (16, 32):
            return "rows of 4 RR, BK of 16 or 32"
        if k % self.k_chunk or k // self.k_chunk < self.split:
            return f"K = {k} is not a multiple of BK with at least SPLIT chunks"
        if self.rows * self.k_chunk > 32 * self.threads or self.tokens * self.k_chunk > 16 * self.threads:
            return "at most 2 weight groups and 4 vec4 of x per thread and chunk"
        return None

    def groups(self, n_cols: int, t_max: int, glu: bool) -> int:
        """Workgroups of a dispatch over n_cols y columns."""
        return -(-n_cols // (self.rows // (2 if glu else 1))) * -(-t_max // self.tokens) * self.split


_MATMUL_MIN_GROUPS = 128  # workgroups wanted (about one per H100/H200 SM) before k is split further
_INT8_FEW_GROUPS = 256  # int8 tiles: fewer workgroups than this (about two an SM) split k ...
_INT8_SPLIT_GROUPS = 512  # ... into parts until there are this many
_MATMUL_MAX_SPLIT = 8
_MATMUL_PART = 256  # k values per split part wanted (parts of 256 to 511 values)
_MATMUL_MIN_PART = 128  # k values a part keeps at least
_MATMUL_MAX_PARTS_BYTES = 96 << 20  # the parts' scratch activation at most (the 4B's GLU in 2 parts: 84 MB)
# f16 tiles measured 5-20% slower than f32 tiles on an H200 (Vulkan) at every 270M shape and tile: NVIDIA
# converts each f16 read to f32 in an extra instruction; so they are off, kept for adapters where they pay.
F16_TILES = False


# The f32 tiles read Q4_K blocks as vec4<u32> (matmul/group16_q4_k_vec4.wgsl: a group's 16 values in two 16-byte loads,
# eight 4-byte ones through quant/bytes.wgsl) and x along each token's k (matmul/tiles.wgsl's x jobs): each dequantising
# thread reads its own row and, before, each x load 32 tokens' rows, so every warp-wide load touched 32 cache lines.
# H200, 512 tokens (bench/kernels.py, us, before -> both): the 4B's Q4_K gate-up 2560 x 2 x 10240 1,342 -> 1,248, down
# 10240 x 2560 837 -> 697, o 2048 x 2560 215 -> 194, q 2560 x 2048 148 -> 138; exact prefill (bench/tree_ab.py,
# interleaved twice) 5,321 / 5,318 -> 5,736 / 5,723 tok/s, the 1B 18,773 -> 19,143, the 270M 67,258 -> 70,072. Measured
# and not kept: warps of 8 x 4 threads (the k step's workgroup loads 128 bytes of rows and of tokens, not 256 and 32; no
# faster: q 138 -> 146, o 194 -> 199), two workgroup-memory buffers with one barrier a chunk (4B prefill 5,712 ->
# 4,823), and Q6_K's ql and qh bytes each from the two aligned vec4 that hold them (its 210-byte blocks start at any
# even byte; the shift costs ~30 ALU operations a span): 4B prefill 5,773 / 5,792 -> 5,778 / 5,797, no gain for the
# code. Since session 23 a Q4_K group fetched a chunk ahead is held as its loaded words (8 registers), not the 16 values
# they decode to, dequantised when stored: 4B exact prefill 5,790 / 5,771 -> 5,861 / 5,853, 1B 20,126 -> 20,452 (270M
# 74,953 -> 74,102, within its spread); chunks of 32 values, which the freed registers were to make room for, still
# slower (4B 5,274, 1B 17,258; each 4B shape in the sweep): their SASS takes 153 registers a thread (the 16-value
# chunk's 125), so one workgroup of 256 threads fits an SM instead of two. Reading x when storing it rather than a chunk
# ahead (fewer registers, its latency left to the SM's other workgroup): 4B 5,822 / 5,838 -> 5,193 / 5,208, with
# 32-value chunks 5,272 / 5,261. A second workgroup-memory buffer with the chunk loop written out over both (literal
# indices, one barrier a chunk; branch try/tiles-unrolled-buffers): 4B 5,776 -> 4,970, 1B 19,930 -> 16,540. Session 24
# (branches try/q4k-halves, try/x-blocks): each group decoded in halves by two threads, so every thread of the 128 x 128
# tile decodes, 4B 5,852 / 5,840 -> 5,681 / 5,685 (5,555 loading only the half's bytes); one 16-word load job a thread
# (a weight group, or 4 tokens x 4 k of x stored as 4 vec4), gate-up 1,229 -> 1,400 us, down 691 -> 792. Kept: a
# block's head loaded once a block and held for its 16 chunks, 4B 5,836 / 5,837 -> 5,862 / 5,877, down 690 -> 675 us.
VEC4_TILE_TYPES = frozenset({GGMLQuantizationType.Q4_K})


def _four_token_tile(n_cols: int, t_max: int, glu: bool) -> MatmulTile:
    """The tile of 4 tokens a thread for a shape, k unsplit: matmul_tile's for steps under 128 tokens (longer ones
    take 8 tokens a thread there), and the layout of the int8 tiles (int8_tile) at every length."""
    if t_max <= 16:
        return MatmulTile(16, 64, 8 if glu else 4, 16)
    if t_max <= 32:
        return MatmulTile(32, 128, 8, 16) if glu or n_cols >= 1024 else MatmulTile(32, 64, 4, 32)
    if t_max >= 128 and (glu or n_cols >= 2048):
        return MatmulTile(128, 64, 8, 32)
    if glu or n_cols >= 1024:
        return MatmulTile(64, 128, 8, 32)
    return MatmulTile(64, 64, 4, 32)


# Steps of 128 tokens or more (see matmul_tile). H200, 512 tokens, against tiles of 128 threads (8 x 8 a thread,
# half the tokens or half the rows, bench/tree_ab.py --set _LONG_STEP_TILE=...): 4B exact prefill 5,792 / 5,787
# tok/s, 64 x 128 5,528 / 5,509, 128 x 64 5,244 / 5,251; chunks of 32 values slower again in the sweep (GLU 1,247
# -> 1,285 us, down in 8 parts 697 -> 739).
_LONG_STEP_TILE = MatmulTile(128, 128, 8, 16, thread_tokens=8)


def matmul_tile(k: int, n_cols: int, t_max: int, glu: bool = False, sms: int | None = None) -> MatmulTile:
    """The tile of the GPU matmul for n_cols y columns (weight rows; gate rows with GLU), rows of k
    values and t_max tokens, and its k split.

    Measured on an H200 (bench/kernels.py --sweep, 54 to 72 tiles and splits per shape, Gemma 3 270M at
    512 tokens); these rules give each shape's fastest or one within 10% of it: 640 x 1024: 64 x 128, 4 x 8
    per thread, k in 2 parts (51 us; the previous 64 x 128 kernel 126 us); 640 x 256: 64 x 64, 4 x 4, 4 parts
    (23 us, was 126); 1024 x 640: 64 x 64, 4 parts (57 us, was 207); 2048 x 640: 64 x 64, 8 parts (95 us, was
    400); 640 x 2048: 128 x 64, 4 x 8, 2 parts; GLU 640 x 2 x 2048: 128 x 64, one part (134 us, the two
    linears and gelu_mul it replaces were 261). k is split into parts of about _MATMUL_PART values (short k
    loops measured fastest; the GLU keeps one dispatch and splits only for workgroups), then further while
    there are fewer than _MATMUL_MIN_GROUPS workgroups. Few tokens take 16- or 32-token tiles.

    Steps of 128 tokens or more take 128 x 128 tiles at 8 tokens x 8 rows a thread, k in chunks of 16 (twice the
    multiply-adds per workgroup-memory load of 4 x 8; chunks of 32 ran about half as fast, their 32 KiB of
    workgroup memory leaving fewer workgroups an SM), and the GLU's k in 2 parts. Measured on an H100
    (bench/kernels.py --sweep, 512 tokens, each shape's fastest 4 x 8 tile against the 8 x 8 one, us): the
    4B's Q4_K q 2560 x 2048 260 -> 229, o 2048 x 2560 351 -> 288, down 10240 x 2560 1,398 -> 1,182, GLU 2560
    x 2 x 10240 2,513 -> 2,028 (2,302 in one part); the 1B's GLU 1152 x 2 x 6912 791 -> 688; its narrower
    shapes no faster (o 1024 x 1152 93 -> 102, down 6912 x 1152 453 either way). End to end (bench/gpu.py,
    against the rules before in one call), exact prefill of 512 tokens: 4B 3,004 -> 3,541 tok/s, 1B 11,865 ->
    11,970. Those rules kept narrower shapes (under 2048 columns, no GLU) at 4 x 8; once tiles.wgsl wrote its k
    steps out, the 8 x 8 tile took them too (H100, exact prefill, against the rule before in one call: 1B 15,065 /
    14,955 -> 16,586 / 16,403 tok/s, 270M 60,573 / 61,447 -> 61,147 / 62,251; chunks of 32 values instead of 16
    were slower again: 4B 4,600 -> 4,009, 1B 15,065 -> 13,920).

    On an NVIDIA GPU whose SM count the device knows (`sms`, gpu/device.py), the 8 x 8 tile's split (no GLU) then
    drops to the one that fills whole rounds of workgroups (_whole_waves_split). H100, exact prefill of 512 tokens
    against the rule without it, interleaved in one call: 1B 16,340 / 16,575 -> 17,207 / 16,614 tok/s, 270M 59,968
    -> 58,412 / 62,841, 4B 4,623 -> 4,700. There a GLU whose tiles fill every SM twice over keeps k whole
    (_glu_fills_sms).
    """
    if t_max >= 128:
        tile = _LONG_STEP_TILE
    else:
        tile = _four_token_tile(n_cols, t_max, glu)
    width = n_cols * (2 if glu else 1)

    def can_double(split: int, min_part: int) -> bool:
        return (split < _MATMUL_MAX_SPLIT and k % (2 * split * tile.k_chunk) == 0 and k // (2 * split) >= min_part
                and 2 * split * t_max * width * 4 <= _MATMUL_MAX_PARTS_BYTES)

    split = 1
    while not glu and can_double(split, _MATMUL_PART):
        split *= 2
    if (glu and tile.thread_tokens == 8 and can_double(split, _MATMUL_PART)
            and not _glu_fills_sms(tile, n_cols, t_max, sms)):
        split = 2
    while tile.groups(n_cols, t_max, glu) * split < _MATMUL_MIN_GROUPS and can_double(split, _MATMUL_MIN_PART):
        split *= 2
    if sms and tile.thread_tokens == 8 and not glu:
        split = _whole_waves_split(tile, k, n_cols, t_max, split, sms)
    return tile._replace(split=split)


# bench/kernels.py --sweep's times of the 8 x 8 tile at 512 tokens, k in 1 to 8 parts, on the 1B's and 4B's shapes
# (H100, 66 of them) fit within 4.5% on average: a workgroup alone on an SM takes 0.130 us a k value, two sharing one
# take _PAIR_TIME times as long (one alone leaves the SM partly idle), and a split's parts cost a fixed 16.5 us (the
# reduce's dispatch) and 0.42 us a MB of parts (splits x T x columns x 8 bytes: written, then read back).
_PAIR_TIME = 1.75
_SPLIT_K_STEPS = 127  # 16.5 us in a lone workgroup's k steps
_PARTS_BYTES_PER_K_STEP = 309_000  # the bytes that cost one k step (0.130 us at 0.42 us a MB)


def _whole_waves_split(tile: MatmulTile, k: int, n_cols: int, t_max: int, most: int, sms: int) -> int:
    """The k split, at most `most`, of the 8 x 8 tile (no GLU) on a GPU of `sms` SMs that the fit above says
    finishes first: the busiest SM runs ceil(workgroups / sms) of them, two at a time, each over k / split values.
    A split that leaves most SMs one workgroup wastes them, one that adds a last round of a few workgroups waits
    for it. H100, the sweep's us at splits 1 / 2 / 3 / 4 / 6 / 8: the 1B's down 6912 x 1152 (36 tiles) 924 / 476
    / 327 / 421 / 290 / 335 (6 picked: 216 workgroups, two on most SMs; 8, which matmul_tile's parts of 256
    values give, leaves 24 for a third round), its o 1024 x 1152 151 / 87 / - / 82 (4, as before); the 4B's down
    10240 x 2560 (80 tiles) 1,374 / 1,206 / - / 941 / - / 797 (8, as before). Never more parts than matmul_tile's
    own rule: more, shorter parts than the sweep measured ran slower in a model than the fit said (the 1B's q|k|v
    in 8 parts of 144 values instead of 4: +0.6 ms a prompt), and the GLU keeps its 2 (unsplit, the fit's pick,
    measured 1.3 ms slower on the 1B's 26 GLUs, their reduce 0.9 ms faster).
    Any split up to the row's chunks, not only those dividing them (the tiles' parts differ by a chunk at most): the
    4B's o 2048 x 2560 in 3 parts instead of 8 (H200, bench/kernels.py: 194 -> 159 us), the 1B's o in 3 and down in 7,
    the 270M's o and down in 6. Exact prefill (bench/tree_ab.py, H200, against divisors only): 4B 5,731 / 5,722 ->
    5,789 / 5,765 tok/s, 1B 19,098 -> 20,032, 270M 67,973 -> 71,933."""
    tiles = tile.groups(n_cols, t_max, False)
    chunks = k // tile.k_chunk

    def cost(split: int) -> float:
        busiest = -(-tiles * split // sms)
        rounds = (busiest // 2) * _PAIR_TIME + busiest % 2
        parts = 0 if split == 1 else _SPLIT_K_STEPS + split * t_max * n_cols * 8 / _PARTS_BYTES_PER_K_STEP
        return rounds * -(-chunks // split) * tile.k_chunk + parts  # the longest part's k steps

    return min(range(1, min(most, chunks) + 1), key=cost)


def _glu_fills_sms(tile: MatmulTile, n_cols: int, t_max: int, sms: int | None) -> bool:
    """Whether the GLU's 8 x 8 tiles, k unsplit, give every SM of a GPU of known SM count two rounds of two
    workgroups: then its k stays whole, saving the parts' round trip and the reduce's dispatch. H100, 512
    tokens, bench/kernels.py --sweep: the 4B's GLU 2560 x 2 x 10240 (640 workgroups) 1,379 us unsplit against
    1,425 in 2 parts; in the model, exact prefill 5,056 / 5,047 -> 5,157 / 5,155 tok/s (interleaved). The 1B's
    (1152 x 2 x 6912, 432 workgroups) keeps its 2 parts: unsplit read 500 against 507 us in the sweep, but in
    the model it measured 0.4 ms slower a prompt in session 16 (tiles +1.3 ms, reduce -0.9) and the same in
    session 17 (exact prefill 17,793 / 17,815 in 2 parts, 17,775 / 17,807 unsplit)."""
    return bool(sms) and tile.groups(n_cols, t_max, True) >= 4 * sms


def tiles_in_f16(device: Device, qtype: GGMLQuantizationType) -> bool:
    """Whether the GPU matmul keeps its tiles in f16: where F16_TILES is on and the adapter has
    "shader-f16", except for F32 and BF16 weights, whose values f16 would round coarsely or overflow."""
    return (F16_TILES and device.has("shader-f16")
            and qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.BF16))


class _Plan(NamedTuple):
    """A linear's kernel choice, every default resolved."""

    kernel: LinearKernel
    subgroups: bool
    whole_rows: bool
    int8: bool  # matmul tiles in 8-bit integers where the weight type allows


def default_kernel(t_max: int, whole_rows: bool) -> LinearKernel:
    """The kernel of a step of t_max tokens: matvec for a few (MATVEC_MAX_TOKENS; SOFTWARE_MATVEC_MAX_TOKENS with
    the software adapters' whole-row kernels), else matmul."""
    most = SOFTWARE_MATVEC_MAX_TOKENS if whole_rows else MATVEC_MAX_TOKENS
    return LinearKernel.MATVEC if t_max <= most else LinearKernel.MATMUL


def _plan(
    builder: ProgramBuilder, weight: QuantWeight, t_max: int,
    kernel: LinearKernel | None, subgroups: bool | None, whole_rows: bool | None, int8: bool | None = None,
) -> _Plan:
    if whole_rows is None:
        whole_rows = builder.device.is_software
    if kernel is None:
        kernel = default_kernel(t_max, whole_rows)
    if subgroups is None:
        subgroups = builder.device.has("subgroup")
    elif subgroups and not builder.device.has("subgroup"):
        raise ValueError(f"{weight.name}: subgroups asked for, but the adapter lacks the feature")
    if kernel is LinearKernel.MATVEC and t_max > MATVEC_MAX_TOKENS:
        raise ValueError(f"{weight.name}: matvec handles at most {MATVEC_MAX_TOKENS} tokens, not {t_max}")
    if int8 is None:
        int8 = builder.executor.int8_matmuls and not builder.device.is_software
    return _Plan(kernel, subgroups, whole_rows, int8)


def _q8_input_fits(width: int, t_max: int) -> bool:
    """Whether an int8 matvec's workgroups can hold their quantised input: a byte a value and 8 bytes a block."""
    return width % 32 == 0 and t_max * width * 5 // 4 <= Q8_INPUT_BYTES


def int8_matvec_pays(weight: QuantWeight, glu: bool) -> bool:
    """Whether an int8 matvec measured faster than the f32 one for this weight. On an H200, one token, Gemma 3 4B
    shapes, f32 -> int8 in us (each workgroup quantising its input: the arithmetic alone is 1.4-2x faster, the
    prologue is what costs): output heads, Q6_K 2560 x 262208: 314 -> 230; Q4_K without GLU, rows of at most
    INT8_MATVEC_MAX_K values: q|k|v 2560 x 4096 on a normalised input 13.3 -> 11.7, o 2048 x 2560 7.9 -> 6.9.
    Not: the gate-up GLU on a normalised input 32.4 -> 37.5 (19.1 on a plain one), down 10240 x 2560 (the
    prologue reads 40 KB a workgroup) Q4_K 22.9 -> 25.6 and Q6_K 18.2 -> 33.9, Q6_K v 2560 x 1024 9.9 -> 11.1;
    nor small Q4_K matrices (INT8_MATVEC_MIN_VALUES), where the prologue outweighs the arithmetic: the 270M's o
    (1024 x 640) in int8 took its decode from 994 to 919 tok/s, the 1B's (1024 x 1152) from 519 to 513."""
    if weight.n >= _HEAD_ROWS:
        return True
    return (weight.qtype is GGMLQuantizationType.Q4_K and not glu and weight.k <= INT8_MATVEC_MAX_K
            and weight.k * weight.n >= INT8_MATVEC_MIN_VALUES)


def _int8_matvec(weight: QuantWeight, plan: "_Plan", t_max: int, glu: bool) -> bool:
    """Whether a matvec runs in 8-bit integers: the plan allows int8, the type has an int8 matvec, its input fits,
    and int8 pays for the shape."""
    return (plan.int8 and not plan.whole_rows and weight.qtype in INT8_MATVEC_KERNELS and WIDE_MATVEC
            and _q8_input_fits(weight.k, t_max) and int8_matvec_pays(weight, glu))


def _matvec_dispatch(
    weight: QuantWeight, n_rows: int, subgroups: bool, whole_rows: bool, glu: bool, t_max: int, int8: bool = False,
    q8_output: bool = False, normed: bool = False, max_threads: int = 0,
) -> tuple[str, dict[str, int | str], int]:
    """(kernel, its extra constants, workgroups) of a matvec over n_rows rows (y columns); int8: the int8
    kernel of the weight's type (see _int8_matvec); q8_output: y is a QuantisedActivation (matvec/store_q8.wgsl,
    whose workgroups hold whole 32-row blocks); normed: the input is a NormedInput, made in every workgroup;
    max_threads: the device's most invocations a workgroup, where workgroups need not be a power of two."""
    if whole_rows:
        if q8_output:
            raise ValueError(f"{weight.name}: the whole-row matvecs do not write quantised outputs")
        threads = software_matvec_threads(n_rows)
        groups = -(-n_rows // (threads * _ROWS_PER_THREAD))
        if weight.qtype is GGMLQuantizationType.Q8_0 and weight.k % 64 == 0:
            return "matvec_q8_0_rows", {"WG": threads}, groups
        return "matvec", {"ENTRY": "whole_rows", "TPR": 1, "ROWS": threads, "STORE": "row"}, groups
    entry = "reduce_subgroup" if subgroups else "reduce_workgroup"
    if int8:
        name, shape = INT8_MATVEC_KERNELS[weight.qtype], int8_matvec_shape(weight.k, n_rows, glu)
    elif weight.qtype in WIDE_MATVEC_KERNELS and WIDE_MATVEC:
        name = WIDE_MATVEC_KERNELS[weight.qtype]
        shape = wide_matvec_shape(weight.k, n_rows, weight.qtype, glu, t_max, normed, max_threads)
    else:
        name, shape = "matvec", matvec_shape(weight.k, n_rows)
    if q8_output and shape.rows % 32:
        shape = MatvecShape(min(shape.tpr, _MATVEC_THREADS // 32), 32)
    paired = None
    if name in ROW_PAIRS_KERNELS and not glu and not q8_output:
        paired = row_pairs_shape(weight, t_max, shape)
    pairs = paired is not None
    shape = paired or shape
    constants = {"ENTRY": entry, "STORE": "q8" if q8_output else "row", "PAIRS": int(pairs)}
    # (not with a quantised output, whose workgroups hold whole 32-row blocks)
    if name == "matvec_q4_k" and t_max >= Q4_WORD_LANES_MIN_TOKENS and not q8_output:
        shape = word_lanes_shape(glu)
        constants["LANE_WORDS"] = 1
    elif t_max >= INTERLEAVE_MIN_TOKENS and not int8 and not q8_output:
        constants["INTERLEAVE"] = row_interleave(shape.rows)
    constants |= {"TPR": shape.tpr, "ROWS": shape.rows}
    return name, constants, -(-n_rows // (shape.rows * (2 if pairs else 1)))


def _any_size_threads(builder: ProgramBuilder, plan: "_Plan") -> int:
    """The most invocations a matvec workgroup may have where its size need not be a power of two (the subgroup
    reduction), else 0."""
    return builder.device.limits.max_invocations if plan.subgroups else 0


def _matmul_config(device: Device, weight: QuantWeight, n_rows: int, t_max: int, glu: bool) -> tuple[MatmulTile, bool]:
    """(tile, f16 tiles) of a GPU matmul over n_rows y columns."""
    return matmul_tile(weight.k, n_rows, t_max, glu, device.sms), tiles_in_f16(device, weight.qtype)


def _dispatch(
    builder: ProgramBuilder, plan: _Plan, weight: QuantWeight, shard: Tensor,
    x: Tensor | NormedInput | Int8Input | QuantisedActivation, y: Tensor | QuantisedActivation, t_max: int, *,
    first_row: int, n_rows: int, row_start: int, y_stride: int, glu: bool = False, leave_parts: bool = False,
) -> SplitSums | None:
    """The dispatches of y[:, row_start + r] for rows first_row + r, r < n_rows, of one shard (with glu,
    gelu_tanh(gate) * up, the up rows following the n_rows gate rows): one, or two for a matmul split
    over k (the parts, then matmul_reduce; with leave_parts, the parts alone, returned). A QuantisedActivation x
    or y takes a GPU matvec."""
    constants: dict[str, int | str] = {
        "WEIGHT_TYPE": weight.type_name, "K": weight.k, "N_ROWS": n_rows, "FIRST_ROW": first_row,
        "ROW_START": row_start, "Y_STRIDE": y_stride, "T_MAX": t_max, "GLU": int(glu),
    }
    q8_output = isinstance(y, QuantisedActivation)
    y_tensor = y.tensor if isinstance(y, QuantisedActivation) else y
    if isinstance(x, QuantisedActivation) and plan.kernel is LinearKernel.MATMUL and isinstance(y, Tensor):
        # a prompt's input quantised by the norm before it (quantises_prompt_input): the int8 tiles read it as it is
        if x.width != weight.k or not _uses_int8(weight, plan, t_max, n_rows, glu):
            raise ValueError(f"{weight.name}: a quantised input of a matmul needs int8 tiles on {x.width} values "
                             f"(int8 matmuls on a GPU, a type of INT8_TYPES, more than 32 tokens)")
        return _int8_dispatch(builder, weight, shard, x, y, t_max, constants, n_rows, row_start, y_stride, glu,
                              leave_parts)
    if isinstance(x, (NormedInput, QuantisedActivation)) or q8_output:
        if plan.kernel is not LinearKernel.MATVEC or plan.whole_rows:
            raise ValueError(f"{weight.name}: a normalised or quantised input or output needs a GPU matvec")
        if q8_output and (n_rows % 32 or row_start % 32 or y_stride % 64):
            raise ValueError(f"{weight.name}: a quantised output needs whole 32-column blocks and rows of a "
                             f"multiple of 64 values")
    if isinstance(x, QuantisedActivation):
        if weight.qtype not in INT8_MATVEC_KERNELS or x.width != weight.k:
            raise ValueError(f"{weight.name}: no int8 matvec for {weight.qtype.name} on a quantised input of "
                             f"width {x.width}")
        name, extra, groups = _matvec_dispatch(weight, n_rows, plan.subgroups, False, glu, t_max, True, q8_output)
        del constants["WEIGHT_TYPE"]
        builder.dispatch(name, constants | extra | {"X_SOURCE": "q8_buffer"}, [builder.step, shard, x.tensor, y_tensor],
                         workgroup_grid(groups))
        return None
    if isinstance(x, NormedInput):
        _check_normed_input(weight, t_max)
        int8 = _int8_matvec(weight, plan, t_max, glu)
        name, extra, groups = _matvec_dispatch(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, int8,
                                               q8_output, normed=True, max_threads=_any_size_threads(builder, plan))
        constants |= extra | {"X_SOURCE": "q8_normed" if int8 else "normed", "EPS": x.eps}
        if name != "matvec":
            del constants["WEIGHT_TYPE"]
        builder.dispatch(name, constants, [builder.step, shard, *_normed_bindings(x, y_tensor)], workgroup_grid(groups))
        return None
    if plan.kernel is LinearKernel.MATVEC:
        int8 = _int8_matvec(weight, plan, t_max, glu)
        name, extra, groups = _matvec_dispatch(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, int8,
                                               q8_output)
        if name != "matvec_q8_0_rows":
            extra |= {"X_SOURCE": "q8_direct" if int8 else "direct"}
        if name != "matvec":
            del constants["WEIGHT_TYPE"]
        builder.dispatch(name, constants | extra, [builder.step, shard, x, y_tensor], workgroup_grid(groups))
        return None
    assert isinstance(y, Tensor)
    if isinstance(x, Int8Input):
        return _int8_dispatch(builder, weight, shard, x, y, t_max, constants, n_rows, row_start, y_stride, glu,
                              leave_parts)
    if plan.whole_rows:
        thread_tokens = min(8, t_max)
        groups = -(-n_rows // (32 if glu else 64)) * -(-t_max // (8 * thread_tokens))
        builder.dispatch("matmul", constants | {"ENTRY": "whole_rows", "WG": 64, "THREAD_TOKENS": thread_tokens},
                         [builder.step, shard, x, y], workgroup_grid(groups))
        return None
    device = builder.device
    tile, f16 = _matmul_config(device, weight, n_rows, t_max, glu)
    problem = tile.problem(weight.k, glu)
    if problem:
        raise ValueError(f"{weight.name}: matmul tile {tile}: the kernel needs {problem}")
    if tile.storage_bytes(f16) > device.limits.workgroup_storage_bytes or tile.threads > device.limits.max_invocations:
        raise ValueError(f"{weight.name}: matmul tile {tile} exceeds the adapter's workgroup limits")
    constants |= {"ENTRY": "tiles", "TILE": "f16" if f16 else "f32", "BT": tile.tokens, "BR": tile.rows,
                  "RR": tile.thread_rows, "TT": tile.thread_tokens, "BK": tile.k_chunk, "SPLIT": tile.split,
                  "GROUP_LOADS": "q4_k_vec4" if weight.qtype in VEC4_TILE_TYPES else "words"}
    return _tiles_dispatch(builder, weight, constants, tile, [builder.step, shard, x], y, [], t_max, n_rows,
                           row_start, y_stride, glu, leave_parts)


def _tiles_dispatch(
    builder: ProgramBuilder, weight: QuantWeight, constants: dict[str, int | str], tile: MatmulTile,
    inputs: list[Tensor], y: Tensor, after: list[Tensor], t_max: int, n_rows: int, row_start: int, y_stride: int,
    glu: bool, leave_parts: bool = False,
) -> SplitSums | None:
    """A tile entry's dispatch (matmul/tiles.wgsl or tiles_i8.wgsl), bound as [*inputs, y, *after]; where the
    tile splits k, it writes a parts scratch instead and kernels/matmul_reduce.wgsl adds the parts into y, or,
    with leave_parts (no GLU, all of y's columns), the parts are returned for the consumer to add."""
    groups = workgroup_grid(tile.groups(n_rows, t_max, glu))
    if tile.split == 1:
        builder.dispatch("matmul", constants, [*inputs, y, *after], groups)
        return None
    width = n_rows * (2 if glu else 1)
    parts = builder.activation(f"{weight.name}.parts", (tile.split * t_max, width))
    builder.dispatch("matmul", constants | {"ROW_START": 0, "Y_STRIDE": width}, [*inputs, parts, *after], groups)
    if leave_parts:
        if glu or row_start or y_stride != n_rows:
            raise ValueError(f"{weight.name}: only a plain linear's whole output can be left as parts")
        return SplitSums(parts, tile.split, t_max)
    reduce = {"N_ROWS": n_rows, "ROW_START": row_start, "Y_STRIDE": y_stride, "T_MAX": t_max, "SPLIT": tile.split,
              "GLU": int(glu)}
    builder.dispatch("matmul_reduce", reduce, [builder.step, parts, y], workgroup_grid(-(-t_max * n_rows // 256)))
    return None


def _int8_dispatch(
    builder: ProgramBuilder, weight: QuantWeight, shard: Tensor, x: Int8Input | QuantisedActivation, y: Tensor,
    t_max: int, constants: dict[str, int | str], n_rows: int, row_start: int, y_stride: int, glu: bool,
    leave_parts: bool = False,
) -> SplitSums | None:
    """matmul/tiles_i8.wgsl over one shard (and matmul_reduce where it splits k), on quantize_q8's two tensors or
    on a QuantisedActivation (both input bindings on its one tensor, its row layout in X_ROW_VEC4, X_ROW_PAIRS
    and X_PAIRS_AT)."""
    tile = int8_tile(weight.k, n_rows, t_max, glu)
    if tile is None or weight.qtype not in INT8_TYPES:
        raise ValueError(f"{weight.name}: no int8 matmul for {weight.qtype.name} at {t_max} tokens")
    if weight.k % (32 * tile.split) or tile.rows % 32 or tile.tokens % 4 or tile.rows + tile.tokens > tile.threads:
        raise ValueError(f"{weight.name}: int8 matmul tile {tile} does not fit K = {weight.k}")
    constants = constants | {"ENTRY": "tiles_i8", "BT": tile.tokens, "BR": tile.rows, "SPLIT": tile.split}
    if isinstance(x, QuantisedActivation):
        k = weight.k
        constants |= {"X_ROW_VEC4": 5 * k // 64, "X_ROW_PAIRS": 5 * k // 32, "X_PAIRS_AT": k // 8}
        q, scales = x.tensor, x.tensor
    else:
        q, scales = x.q, x.scales
    return _tiles_dispatch(builder, weight, constants, tile, [builder.step, shard, q], y, [scales], t_max, n_rows,
                           row_start, y_stride, glu, leave_parts)


def _check_input(x: Tensor | NormedInput | QuantisedActivation, width: int, t_max: int, what: str) -> None:
    if isinstance(x, QuantisedActivation):
        t = x.tensor
        if x.width != width or t.dtype != "u32" or t.shape[0] < t_max or t.shape[1] != width * 5 // 16:
            raise ValueError(f"{what} {t} must be a quantised activation of [>= {t_max}, {width}]")
        return
    _check_activation(x.block_out if isinstance(x, NormedInput) else x, width, t_max, what)


def linear(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor | NormedInput | QuantisedActivation, y: Tensor,
    t_max: int, *,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    int8: bool | None = None, leave_parts: bool = False,
) -> Tensor | SplitSums:
    """y[t, :] = W x[t, :] for the step's first min(n_tokens, t_max) tokens: x [t_max, K] -> y [t_max, N].
    Returns where the values are: y, or with leave_parts, for a weight of one shard whose matmul splits k, its
    parts (SplitSums) for a consumer that adds them (the residual norms), y then left unwritten.

    kernel: matvec when t_max <= MATVEC_MAX_TOKENS (SOFTWARE_MATVEC_MAX_TOKENS with whole rows), else
    matmul, unless given. subgroups: the
    matvec reduction by subgroup shuffles, by default where the device has the "subgroup" feature.
    whole_rows: matvec and matmul by whole rows per thread (the software adapters' kernels), by
    default on a software adapter; on a GPU the split rows and workgroup-memory tiles are faster.
    One dispatch per weight shard. x may be a NormedInput where folds_norms says so (each shard's
    dispatch computes it; the same residual_out values are written by each), or a QuantisedActivation
    (an int8 matvec: INT8_MATVEC_KERNELS weights). int8: GPU matmul tiles in 8-bit integers for
    INT8_TYPES weights (x quantised once, shared by the shards), by default where the executor asks for
    them (int8_matmuls) and the adapter is not a software one.
    """
    _check_weight(weight)
    _check_input(x, weight.k, t_max, "x")
    _check_activation(y, weight.n, t_max, "y")
    plan = _plan(builder, weight, t_max, kernel, subgroups, whole_rows, int8)
    source: Tensor | NormedInput | Int8Input | QuantisedActivation = x
    if isinstance(x, Tensor) and all(_uses_int8(weight, plan, t_max, shard.n_rows, False)
                                     for shard in weight.shards):
        source = quantize_input(builder, x, t_max)
    one_shard = len(weight.shards) == 1
    for shard in weight.shards:
        parts = _dispatch(builder, plan, weight, shard.tensor, source, y, t_max, first_row=0, n_rows=shard.n_rows,
                          row_start=shard.row_start, y_stride=weight.n, leave_parts=leave_parts and one_shard)
        if parts is not None:
            return parts
    return y


def linear_output(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor | NormedInput | QuantisedActivation, name: str,
    t_max: int, **choices: bool | LinearKernel | None,
) -> Tensor | SplitSums:
    """`linear` into a new activation `name` [t_max, N], or, where its matmul splits k (one shard), its parts
    (SplitSums), which a residual norm adds as it reads them instead of a matmul_reduce dispatch: on an H200,
    512-token prompts against the tree before, interleaved twice, the 270M's exact prefill 54,767 / 52,951 ->
    57,140 / 56,924 tok/s, the 1B's 12,585 / 12,468 -> 12,713 / 12,523, the 4B's int8 6,924 / 6,946 -> 6,954 /
    6,978. choices: linear's keyword arguments."""
    y = builder.activation(name, (t_max, weight.n))
    out = linear(builder, weight, x, y, t_max, leave_parts=True, **choices)  # type: ignore[arg-type]
    if out is not y:
        builder.discard(y)
    return out


def linear_glu(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor | NormedInput | QuantisedActivation,
    y: Tensor | QuantisedActivation, t_max: int, *,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    int8: bool | None = None,
) -> None:
    """y = gelu_tanh(x Wg^T) * (x Wu^T) for the step's first min(n_tokens, t_max) tokens: x [t_max, K]
    -> y [t_max, F], Gemma's gated feed-forward (GeGLU) before its down projection.

    weight: 2F rows, the gate projection's F rows then the up projection's F (the two GGUF tensors'
    bytes concatenated: same type, rows contiguous). One dispatch computing both and combining them
    in its epilogue, as gpu/kernels/gelu_mul.wgsl would; a weight split over several shards (the
    binding limit) falls back to two linears into activations and a gelu_mul dispatch. kernel,
    subgroups, whole_rows and int8 choose the kernel as for `linear`. x may be a QuantisedActivation as
    for `linear`, and y too (see quantises_glu_output): the matvec's epilogue quantises the output.
    """
    _check_weight(weight)
    if weight.n % 2:
        raise ValueError(f"{weight.name}: a gate-up weight needs an even number of rows, not {weight.n}")
    f = weight.n // 2
    _check_input(x, weight.k, t_max, "x")
    if isinstance(y, QuantisedActivation):
        _check_input(y, f, t_max, "y")
        if len(weight.shards) != 1:
            raise ValueError(f"{weight.name}: a quantised output needs a gate-up of one shard")
    else:
        _check_activation(y, f, t_max, "y")
    plan = _plan(builder, weight, t_max, kernel, subgroups, whole_rows, int8)
    if len(weight.shards) == 1:
        source: Tensor | NormedInput | Int8Input | QuantisedActivation = x
        if isinstance(x, Tensor) and _uses_int8(weight, plan, t_max, f, True):
            source = quantize_input(builder, x, t_max)
        _dispatch(builder, plan, weight, weight.shards[0].tensor, source, y, t_max, first_row=0, n_rows=f,
                  row_start=0, y_stride=f, glu=True)
        return
    gate = builder.activation(f"{weight.name}.gate", (t_max, f))
    up = builder.activation(f"{weight.name}.up", (t_max, f))
    for shard in weight.shards:
        end = shard.row_start + shard.n_rows
        if shard.row_start < f:  # its gate rows
            _dispatch(builder, plan, weight, shard.tensor, x, gate, t_max, first_row=0,
                      n_rows=min(end, f) - shard.row_start, row_start=shard.row_start, y_stride=f)
        if end > f:  # its up rows
            begin = max(shard.row_start, f)
            _dispatch(builder, plan, weight, shard.tensor, x, up, t_max, first_row=begin - shard.row_start,
                      n_rows=end - begin, row_start=begin - f, y_stride=f)
    gelu_mul(builder, gate, up, y)


def stacks_in_one_matvec(builder: ProgramBuilder, first: QuantWeight, second: QuantWeight, t_max: int,
                         subgroups: bool | None = None, whole_rows: bool | None = None) -> bool:
    """Whether linear_stacked computes these two matrices of one input in one dispatch
    (kernels/matvec_q4_k_q6_k.wgsl): a Q4_K matrix and a Q6_K one of one shard each and the same rows' width,
    decode matvecs on a GPU, with the K-quant kernels of their own. Under int8 matmuls too: the stacked f32
    dispatch beats an int8 q|k matvec and an f32 v (H200, Gemma 3 4B shapes, int8 decode 302 -> 314 tok/s)."""
    if (first.qtype is not GGMLQuantizationType.Q4_K or second.qtype is not GGMLQuantizationType.Q6_K
            or first.k != second.k or len(first.shards) != 1 or len(second.shards) != 1 or not WIDE_MATVEC):
        return False
    plans = [_plan(builder, w, t_max, None, subgroups, whole_rows) for w in (first, second)]
    return all(p.kernel is LinearKernel.MATVEC and not p.whole_rows for p in plans)


def linear_stacked(
    builder: ProgramBuilder, first: QuantWeight, second: QuantWeight, x: Tensor | NormedInput, y: Tensor,
    t_max: int, *, subgroups: bool | None = None, whole_rows: bool | None = None,
) -> None:
    """y = x [W1 | W2]^T: two matrices of one input (a Q4_K q|k and a Q6_K v) in one matvec dispatch, W1's
    first.n columns then W2's second.n, where stacks_in_one_matvec says so. The workgroups take rows of one
    matrix each, at one split (wide_matvec_shape's for all the rows as Q4_K ones). subgroups and whole_rows
    as for `linear` (whole rows have no such kernel)."""
    if not stacks_in_one_matvec(builder, first, second, t_max, subgroups, whole_rows):
        raise ValueError(f"{first.name} ({first.qtype.name}) and {second.name} ({second.qtype.name}): no one "
                         f"matvec for them at {t_max} tokens (see stacks_in_one_matvec)")
    _check_input(x, first.k, t_max, "x")
    n_rows = first.n + second.n
    _check_activation(y, n_rows, t_max, "y")
    normed = isinstance(x, NormedInput)
    plan = _plan(builder, first, t_max, None, subgroups, whole_rows)
    shape = wide_matvec_shape(first.k, n_rows, GGMLQuantizationType.Q4_K, False, t_max, normed,
                              _any_size_threads(builder, plan))
    if first.n % shape.rows:
        shape = MatvecShape(shape.tpr, math.gcd(shape.rows, first.n))
    constants: dict[str, int | str] = {
        "K": first.k, "N_ROWS": n_rows, "N_ROWS_A": first.n, "FIRST_ROW": 0, "ROW_START": 0, "Y_STRIDE": n_rows,
        "T_MAX": t_max, "ENTRY": "reduce_subgroup" if plan.subgroups else "reduce_workgroup", "TPR": shape.tpr,
        "ROWS": shape.rows, "STORE": "row",
    }
    weights = [builder.step, first.shards[0].tensor]
    if normed:
        assert isinstance(x, NormedInput)
        _check_normed_input(first, t_max)
        tensors = weights + _normed_bindings(x, y)
        constants |= {"X_SOURCE": "normed", "EPS": x.eps}
    else:
        assert isinstance(x, Tensor)
        tensors = weights + [x, y]
        constants |= {"X_SOURCE": "direct"}
    constants["Q6_BINDING"] = len(tensors)
    builder.dispatch("matvec_q4_k_q6_k", constants, tensors + [second.shards[0].tensor],
                     workgroup_grid(-(-n_rows // shape.rows)))


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
