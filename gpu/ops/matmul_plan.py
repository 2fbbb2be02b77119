"""Planning of the quantised matrix kernels: which kernel a linear runs and how it splits the work, as pure
functions of shapes, weight types, the device's traits and a MatmulTuning (gpu/ops/matmul_tuning.py).

Nothing here records a dispatch or touches wgpu: gpu/ops/matmul.py asks for a plan and records it, and tests of
planning need no adapter. The kernels (gpu/ops/matmul.py's docstring says what each computes):
- decode (matvec): threads split each row's K and reduce once a row (matvec_shape; the wide K-quant kernels by
  32-value units: wide_matvec_shape; int8: int8_matvec_shape); rows in pairs on one load of x (row_pairs_shape),
  Q4_K lanes along quant words (word_lanes_shape), rows interleaved thread by thread (row_interleave). Software
  adapters take whole rows a thread (software_matvec_threads).
- prompts (matmul): workgroup-memory tiles of tokens x rows, k split over workgroups where the tiles alone leave
  the GPU few of them (matmul_tile; int8: int8_tile); software adapters take whole rows a thread.
plan_linear resolves a linear's defaults (kernel, reduction, whole rows, int8) and plan_shard gives one shard's
dispatch (a MatvecPlan, TilePlan or WholeRowsPlan, with its defines and grid). The fusion predicates at the end
(folds_norms, quantises_*, stacks_in_one_matvec) say which fused inputs and outputs a program should build.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

if TYPE_CHECKING:
    from gpu.ops.matmul_tuning import MatmulTuning

Q = GGMLQuantizationType
GROUP_VALUES = 16  # values per dequant16 call (kernels/quant/bytes.wgsl)
FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)
ROWS_PER_THREAD = 4  # whole-row matvec kernels (software adapters): rows a thread
UNIFORM_X_BYTES = 64 << 10  # largest x a whole-row matvec reads from a uniform binding: WebGPU's least binding limit
# K-quant matvecs with kernels of their own: 32 values a load step, scales applied per sub-block
WIDE_MATVEC_KERNELS = {Q.Q4_K: "matvec_q4_k", Q.Q6_K: "matvec_q6_k"}
ROW_PAIRS_KERNELS = frozenset({"matvec_q4_k", "matvec_q6_k"})  # the matvec kernels that implement PAIRS
# The software adapters' matvecs of these types read whole blocks in vec4 loads (matvec/four_rows.wgsl), rows of K a
# multiple of the values given (a Q8_0 block pair, a Q5_0 block quad, a Q4_K block); other K take matvec.wgsl
WHOLE_ROW_BLOCK_KERNELS = {Q.Q8_0: ("matvec_q8_0_rows", 64), Q.Q5_0: ("matvec_q5_0_rows", 128),
                           Q.Q4_K: ("matvec_q4_k_rows", 256)}
# ... and these on x quantised to 8 bits (where the executor asks for int8 matmuls; the same K multiples)
WHOLE_ROW_INT8_KERNELS = {Q.Q8_0: "matvec_q8_0_rows_i8"}
# Weight types whose matmul tiles can run in 8-bit integers (kernels/quant_i8/<type>.wgsl unpack their blocks)
INT8_TYPES = frozenset({Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0})
# Decode matvecs in 8-bit integers, each workgroup quantising its input (kernels/matvec/q8_input.wgsl)
INT8_MATVEC_KERNELS = {Q.Q4_K: "matvec_q4_k_i8", Q.Q6_K: "matvec_q6_k_i8"}
# The f32 tiles read these types' groups as vec4<u32> (matmul/group16_q4_k_vec4.wgsl)
VEC4_TILE_TYPES = frozenset({Q.Q4_K})
# The software matmul holds these types' block loads across the block's groups (matmul/held_<type>.wgsl)
HELD_LOAD_TYPES = {Q.Q5_0: "q5_0", Q.Q4_K: "q4_k", Q.Q8_0: "q8_0", Q.Q6_K: "q6_k"}


@dataclass(frozen=True)
class DeviceTraits:
    """What planning needs from a device (gpu.device.Device)."""

    software: bool  # a CPU rasteriser (lavapipe): whole-row kernels
    subgroups: bool  # the "subgroup" feature: subgroup reductions, workgroups of any size
    f16: bool  # the "shader-f16" feature
    sms: int | None  # streaming multiprocessors of a known NVIDIA GPU, else None
    max_invocations: int  # most invocations a workgroup
    workgroup_storage_bytes: int  # workgroup memory a workgroup may use


class WeightShape(Protocol):
    """What planning reads of a weight (gpu.weights.QuantWeight has it)."""

    name: str
    qtype: GGMLQuantizationType
    k: int  # values a row
    n: int  # rows
    shards: Sequence[Any]  # one a binding: a dispatch each


class LinearKernel(Enum):
    """The kernel a linear layer runs; `linear` picks one unless told."""

    MATVEC = "matvec"
    MATMUL = "matmul"


@dataclass(frozen=True)
class LinearPlan:
    """A linear's kernel choice, every default resolved."""

    kernel: LinearKernel
    subgroups: bool
    whole_rows: bool
    int8: bool  # int8 kernels allowed where the weight type and shape take them


class MatvecShape(NamedTuple):
    """How matvec splits a shard: TPR and ROWS of kernels/matvec.wgsl."""

    tpr: int  # threads per row (a power of two)
    rows: int  # rows per workgroup: workgroup size = tpr * rows


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


Defines = tuple[tuple[str, int | str], ...]  # a kernel's constants in the order its profile label takes them


class LinearInput(Enum):
    """What a linear's dispatch reads as x."""

    F32 = "f32"  # an f32 activation [t_max, K]
    # an f32 activation that also binds as a uniform (a software adapter's, of at most UNIFORM_X_BYTES): the whole-row
    # matvecs read it there (matvec/x_binding_uniform.wgsl)
    F32_UNIFORM = "f32_uniform"
    NORMED = "normed"  # a NormedInput: residual + norm made again in every matvec workgroup
    # a PrenormedInput: residual times the norm's weight, its rms from partial sums of squares (applied to the sums)
    PRENORMED = "prenormed"
    INT8 = "int8"  # quantize_q8's q and scales (gpu.ops.matmul.Int8Input), for the int8 tiles
    QUANTISED = "quantised"  # a QuantisedActivation: int8 blocks kept between two dispatches


@dataclass(frozen=True)
class MatvecPlan:
    """A decode dispatch over some rows (kernels/matvec*.wgsl): its kernel, split and the defines that say so."""

    kernel: str  # matvec, a software adapters' matvec_*_rows, or a WIDE_MATVEC_KERNELS / INT8_MATVEC_KERNELS kernel
    shape: MatvecShape  # threads a row and rows (row slots, with pairs) a workgroup; whole rows: (1, threads)
    groups: int  # workgroups
    defines: Defines  # split, reduction, output and input (X_SOURCE) defines
    pairs: bool = False  # two rows a thread on one load of x
    lane_words: bool = False  # Q4_K lanes along each block's quant words
    interleave: int = 0  # rows interleaved thread by thread (0: the define not given)
    every_row: bool = False  # sums for every row of x, past the step's tokens too (EVERY_ROW)


@dataclass(frozen=True)
class TilePlan:
    """A GPU matmul dispatch over workgroup-memory tiles (matmul/tiles.wgsl, tiles_i8.wgsl), k split included."""

    tile: MatmulTile
    groups: int  # workgroups
    defines: Defines
    f16: bool = False  # tiles in f16 (f32 tiles otherwise)
    int8: bool = False  # matmul/tiles_i8.wgsl on int8 x
    kernel: str = "matmul"


@dataclass(frozen=True)
class WholeRowsPlan:
    """The software adapters' matmul (matmul/whole_rows.wgsl): 128 rows (64 gate rows with GLU) x 8 threads' tokens a
    workgroup, up to 8 tokens a thread."""

    thread_tokens: int
    groups: int  # workgroups
    defines: Defines
    kernel: str = "matmul"


ShardPlan = MatvecPlan | TilePlan | WholeRowsPlan


# -- kernel choice ------------------------------------------------------------------------------------------------

def block_values(qtype: GGMLQuantizationType) -> int:
    """Values per block as the kernels read them: GGML's block, or 16 for the float types."""
    return GROUP_VALUES if qtype in FLOAT_TYPES else GGML_QUANT_SIZES[qtype][0]


def default_kernel(t_max: int, whole_rows: bool, tuning: MatmulTuning) -> LinearKernel:
    """The kernel of a step of t_max tokens: matvec for a few (matvec_max_tokens; software_matvec_max_tokens with the
    software adapters' whole-row kernels), else matmul."""
    most = tuning.software_matvec_max_tokens if whole_rows else tuning.matvec_max_tokens
    return LinearKernel.MATVEC if t_max <= most else LinearKernel.MATMUL


def plan_linear(
    name: str, traits: DeviceTraits, tuning: MatmulTuning, int8_matmuls: bool, t_max: int,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    int8: bool | None = None,
) -> LinearPlan:
    """A linear's choices with the defaults resolved: whole rows on software adapters, matvec for few tokens,
    subgroups where the device has them, int8 where the executor asks for it (int8_matmuls)."""
    if whole_rows is None:
        whole_rows = traits.software
    if kernel is None:
        kernel = default_kernel(t_max, whole_rows, tuning)
    if subgroups is None:
        subgroups = traits.subgroups
    elif subgroups and not traits.subgroups:
        raise ValueError(f"{name}: subgroups asked for, but the adapter lacks the feature")
    if kernel is LinearKernel.MATVEC and t_max > tuning.matvec_max_tokens:
        raise ValueError(f"{name}: matvec handles at most {tuning.matvec_max_tokens} tokens, not {t_max}")
    if int8 is None:
        int8 = int8_matmuls
    return LinearPlan(kernel, subgroups, whole_rows, int8)


def any_size_threads(traits: DeviceTraits, plan: LinearPlan) -> int:
    """The most invocations a matvec workgroup may have where its size need not be a power of two (the subgroup
    reduction), else 0."""
    return traits.max_invocations if plan.subgroups else 0


# -- matvec splits --------------------------------------------------------------------------------------------------

def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def matvec_shape(k: int, n_rows: int, tuning: MatmulTuning, unit_values: int = GROUP_VALUES,
                 units_per_thread: int | None = None, rows_read: int | None = None,
                 target_groups: int | None = None, units_tpr: int | None = None) -> MatvecShape:
    """The split of an [n_rows, k] shard over matvec threads (GPU adapters).

    Threads per row, a power of two from 4 up to 64: enough threads in all (rows_read * tpr >=
    matvec_target_threads; rows_read counts a GLU's up rows too) to hide memory latency, and enough that a thread
    takes at most units_per_thread units of unit_values values (or units_tpr threads, where given), at least two
    units each. Output heads (rows_read >= head_rows: the rows alone give threads enough) take head_tpr threads a
    row, long runs of units each. Rows per workgroup: matvec_threads threads, fewer while that leaves fewer than
    target_groups workgroups.
    """
    units_per_thread = units_per_thread or tuning.matvec_groups_per_thread
    target_groups = target_groups or tuning.matvec_target_groups
    units = k // unit_values
    rows_read = rows_read or n_rows
    units_tpr = _pow2_floor(units_tpr or units // units_per_thread)
    wanted = max(_pow2_ceil(-(-tuning.matvec_target_threads // rows_read)), units_tpr)
    if rows_read >= tuning.head_rows:
        wanted = tuning.head_tpr
    tpr = max(4, min(wanted, 64, _pow2_floor(units // 2)))
    rows = max(1, tuning.matvec_threads // tpr)
    while rows > 1 and rows * tpr > tuning.matvec_min_threads and -(-n_rows // rows) < target_groups:
        rows //= 2
    return MatvecShape(tpr, rows)


def wide_matvec_shape(k: int, n_rows: int, qtype: GGMLQuantizationType, glu: bool, t_max: int,
                      tuning: MatmulTuning, normed: bool = False, max_threads: int = 0) -> MatvecShape:
    """matvec_shape for matvec_q4_k.wgsl and matvec_q6_k.wgsl (32-value units): at most q4_units_per_thread Q4_K
    units a thread, q6_units_per_thread Q6_K ones, whose units cost more loads; a one-token Q4_K gate-up takes
    one_token_glu_tpr threads a row whatever its units (more where its rows need them for matvec_target_threads
    threads in all). On a plain input, rows a workgroup shrink until there are wide_target_groups workgroups; on a
    normalised input (normed), whose every workgroup makes the input again, matvec_target_groups, and where the
    reduction takes workgroups of any size (max_threads), as many rows a workgroup as leave that many workgroups,
    not necessarily a power of two (the rounds of workgroups then fill the SMs evenly)."""
    units_tpr = None
    if qtype is GGMLQuantizationType.Q4_K:
        per_thread = tuning.q4_units_per_thread
        if glu and t_max == 1:
            units_tpr = tuning.one_token_glu_tpr
    else:
        per_thread = tuning.q6_units_per_thread
    shape = matvec_shape(k, n_rows, tuning, 32, per_thread, rows_read=n_rows * (2 if glu else 1),
                         target_groups=tuning.matvec_target_groups if normed else tuning.wide_target_groups,
                         units_tpr=units_tpr)
    if normed:
        rows = -(-n_rows // tuning.matvec_target_groups)
        if shape.rows < rows <= max_threads // shape.tpr:
            shape = MatvecShape(shape.tpr, rows)
    return shape


def row_pairs_shape(k: int, n: int, t_max: int, shape: MatvecShape, tuning: MatmulTuning) -> MatvecShape | None:
    """The split of a ROW_PAIRS_KERNELS matvec (no GLU, f32 output) of a weight of n rows of k values whose threads
    each take two rows, ROWS apart, on the same loads of x (PAIRS), or None where single rows are faster. A unit of
    32 values costs 8 vec4 loads of x against one of the weight, so on long rows (row_pairs_min_k) and output heads
    the loads of x bound it: one token pairs those at twice the threads a row (up to 64; not where a row already
    has 64) and half the rows a workgroup. Steps of several tokens pair every row but heads' at
    multi_token_pair_tpr threads a row or more, a thread's loads of x serving both rows for every token. Not for
    GLU: a gate-up thread on two gate rows and their up rows measured slower at every split."""
    if not tuning.row_pairs:
        return None
    if t_max > 1 and n < tuning.head_rows:
        return MatvecShape(max(tuning.multi_token_pair_tpr, shape.tpr), max(1, shape.rows // 2))
    if k < tuning.row_pairs_min_k and n < tuning.head_rows:
        return None
    if t_max == 1 and shape.tpr >= 64:
        return None
    return MatvecShape(min(64, 2 * shape.tpr), max(1, shape.rows // 2))


def word_lanes_shape(glu: bool, tuning: MatmulTuning) -> MatvecShape:
    """The split of a Q4_K matvec with its lanes along each block's 32 quant words (steps of
    q4_word_lanes_min_tokens or more): 64 threads a row, 32 with GLU; it replaces wide_matvec_shape's and
    row_pairs_shape's threads a row and rows, not the pairing."""
    tpr = 32 if glu else 64
    return MatvecShape(tpr, tuning.word_lanes_threads // tpr)


def row_interleave(rows: int, t_max: int, tuning: MatmulTuning) -> int:
    """Rows a matvec workgroup of `rows` rows (row slots, with PAIRS) interleaves thread by thread in steps of t_max
    tokens (one, or interleave_min_tokens or more): the largest power of two up to tuning.row_interleave
    (one_token_row_interleave for one token) dividing it."""
    most = tuning.one_token_row_interleave if t_max == 1 else tuning.row_interleave
    interleave = 1
    while interleave < most and rows % (2 * interleave) == 0:
        interleave *= 2
    return interleave


def int8_matvec_shape(k: int, n_rows: int, glu: bool, tuning: MatmulTuning) -> MatvecShape:
    """matvec_shape for the int8 matvecs (INT8_MATVEC_KERNELS, 32-value units): up to 4 units a thread, their
    arithmetic being light."""
    return matvec_shape(k, n_rows, tuning, 32, 4, rows_read=n_rows * (2 if glu else 1))


def software_matvec_threads(n_rows: int, tuning: MatmulTuning) -> int:
    """Workgroup size of the whole-row matvec kernels (ROWS_PER_THREAD rows a thread) for a shard of n_rows: 64, or
    fewer (down to one 8-lane SIMD slice) so that small shards still give every CPU core workgroups."""
    return max(8, min(64, _pow2_floor(n_rows // (ROWS_PER_THREAD * tuning.software_min_groups))))


# -- int8 and fused inputs --------------------------------------------------------------------------------------------

def normed_input_fits(width: int, t_max: int, tuning: MatmulTuning) -> bool:
    """Whether a matvec workgroup can normalise its input itself (a NormedInput of t_max rows of width values)."""
    return (t_max <= tuning.matvec_max_tokens and width % 4 == 0 and width <= tuning.normed_input_max_width
            and t_max * width * 4 <= tuning.normed_input_bytes)


def q8_input_fits(width: int, t_max: int, tuning: MatmulTuning) -> bool:
    """Whether an int8 matvec's workgroups can hold their quantised input: a byte a value and 8 bytes a block."""
    return width % 32 == 0 and t_max * width * 5 // 4 <= tuning.q8_input_bytes


def int8_matvec_pays(weight: WeightShape, glu: bool, tuning: MatmulTuning) -> bool:
    """Whether an int8 matvec measured faster than the f32 one for this weight (each workgroup quantising its input:
    the prologue is what costs): output heads, and Q4_K matrices without GLU of rows of at most int8_matvec_max_k
    values and at least int8_matvec_min_values values; not gate-ups, long downs or small matrices."""
    if tuning.int8_matvec_everywhere or weight.n >= tuning.head_rows:
        return True
    return (weight.qtype is GGMLQuantizationType.Q4_K and not glu and weight.k <= tuning.int8_matvec_max_k
            and weight.k * weight.n >= tuning.int8_matvec_min_values)


def whole_row_block_kernel(weight: WeightShape) -> str | None:
    """The software adapters' block matvec for this weight (WHOLE_ROW_BLOCK_KERNELS), or None where its type has
    none or its rows are no multiple of the kernel's block group (matvec.wgsl's whole_rows then)."""
    kernel = WHOLE_ROW_BLOCK_KERNELS.get(weight.qtype)
    return kernel[0] if kernel is not None and weight.k % kernel[1] == 0 else None


def int8_matvec(weight: WeightShape, plan: LinearPlan, t_max: int, glu: bool, tuning: MatmulTuning) -> bool:
    """Whether a matvec runs in 8-bit integers: the plan allows int8, the type has an int8 matvec, its input fits,
    and int8 pays for the shape (on a GPU; on a software adapter, whose whole-row kernels convert each weight byte
    to f32 otherwise, wherever the type has one)."""
    if not (plan.int8 and q8_input_fits(weight.k, t_max, tuning)):
        return False
    if plan.whole_rows:
        return weight.qtype in WHOLE_ROW_INT8_KERNELS and whole_row_block_kernel(weight) is not None
    return (weight.qtype in INT8_MATVEC_KERNELS and tuning.wide_matvec
            and int8_matvec_pays(weight, glu, tuning))


def quantised_input_pays(weight: WeightShape, t_max: int, tuning: MatmulTuning) -> bool:
    """Whether an input kept quantised between two dispatches (a QuantisedActivation) pays for a decode matvec of
    this weight: an INT8_MATVEC_KERNELS matrix of at least int8_matvec_min_values values."""
    return (weight.qtype in INT8_MATVEC_KERNELS and t_max <= tuning.matvec_max_tokens
            and weight.k * weight.n >= tuning.int8_matvec_min_values)


def uses_int8_tiles(weight: WeightShape, plan: LinearPlan, t_max: int, n_cols: int, glu: bool,
                    tuning: MatmulTuning) -> bool:
    """Whether a linear runs matmul/tiles_i8.wgsl: a tiled matmul the plan allows int8 for, of an INT8_TYPES
    weight, with a tile for its shape."""
    return (plan.int8 and plan.kernel is LinearKernel.MATMUL and not plan.whole_rows
            and weight.qtype in INT8_TYPES and int8_tile(weight.k, n_cols, t_max, tuning, glu) is not None)


def int8_glu_matvec(traits: DeviceTraits, int8_matmuls: bool, shards: int) -> bool:
    """Whether a program may keep a gate-up's input or output quantised at all: the executor asks for int8
    matmuls, the adapter is a GPU, and the gate-up is one shard (one GLU dispatch)."""
    return int8_matmuls and not traits.software and shards == 1


# -- matvec plans -----------------------------------------------------------------------------------------------------

def plan_matvec(
    weight: WeightShape, n_rows: int, subgroups: bool, whole_rows: bool, glu: bool, t_max: int,
    tuning: MatmulTuning, int8: bool = False, q8_output: bool = False, normed: bool = False, max_threads: int = 0,
    x_source: str | None = None, residual_output: bool = False,
) -> MatvecPlan:
    """The matvec over n_rows rows (y columns) of a weight; int8: the int8 kernel of the weight's type (see
    int8_matvec); q8_output: y is quantised (matvec/store_q8.wgsl, whose workgroups hold whole 32-row blocks);
    normed: the input is normalised in every workgroup; max_threads: the device's most invocations a workgroup,
    where workgroups need not be a power of two; x_source: the X_SOURCE define (how the kernel reads x; "direct"
    where not given; "uniform" for whole rows only); residual_output: the rows are added to a residual stream and
    make the next norm's input (matvec/store_residual.wgsl)."""
    if whole_rows:
        if q8_output:
            raise ValueError(f"{weight.name}: the whole-row matvecs do not write quantised outputs")
        threads = software_matvec_threads(n_rows, tuning)
        groups = -(-n_rows // (threads * ROWS_PER_THREAD))
        block_kernel = whole_row_block_kernel(weight)
        # the block kernels read f32 x (the int8 one quantises it in its prologue) from a storage or uniform binding
        x_defines: list[tuple[str, int | str]] = [("X_SOURCE", x_source or "direct")]
        if x_source == "uniform":
            x_defines.append(("X_VEC4", t_max * weight.k // 4))
        if block_kernel is not None:
            name = WHOLE_ROW_INT8_KERNELS[weight.qtype] if int8 else block_kernel
            return MatvecPlan(name, MatvecShape(1, threads), groups, (("WG", threads), *x_defines))
        defines: list[tuple[str, int | str]] = [("ENTRY", "whole_rows"), ("TPR", 1), ("ROWS", threads),
                                                ("STORE", "row"), *x_defines]
        return MatvecPlan("matvec", MatvecShape(1, threads), groups, tuple(defines))
    entry = "reduce_subgroup" if subgroups else "reduce_workgroup"
    if int8:
        name, shape = INT8_MATVEC_KERNELS[weight.qtype], int8_matvec_shape(weight.k, n_rows, glu, tuning)
    elif weight.qtype in WIDE_MATVEC_KERNELS and tuning.wide_matvec:
        name = WIDE_MATVEC_KERNELS[weight.qtype]
        shape = wide_matvec_shape(weight.k, n_rows, weight.qtype, glu, t_max, tuning, normed, max_threads)
    else:
        name, shape = "matvec", matvec_shape(weight.k, n_rows, tuning)
    shape = tuning.matvec_split or shape
    if q8_output and shape.rows % 32:
        shape = MatvecShape(min(shape.tpr, tuning.matvec_threads // 32), 32)
    paired = None
    if name in ROW_PAIRS_KERNELS and not glu and not q8_output:
        paired = row_pairs_shape(weight.k, weight.n, t_max, shape, tuning)
    pairs = paired is not None
    if paired is not None:
        shape = tuning.matvec_split or paired
    store = "q8" if q8_output else "residual" if residual_output else "row"
    defines = [("ENTRY", entry), ("STORE", store), ("PAIRS", int(pairs))]
    lane_words, interleave = False, 0
    # (not with a quantised output, whose workgroups hold whole 32-row blocks)
    if name == "matvec_q4_k" and t_max >= tuning.q4_word_lanes_min_tokens and not q8_output:
        shape = tuning.matvec_split or word_lanes_shape(glu, tuning)
        lane_words = True
        defines.append(("LANE_WORDS", 1))
    elif not int8 and not q8_output and (t_max == 1 or t_max >= tuning.interleave_min_tokens):
        interleave = row_interleave(shape.rows, t_max, tuning)
        defines.append(("INTERLEAVE", interleave))
    defines += [("TPR", shape.tpr), ("ROWS", shape.rows)]
    every_row = computes_every_row(name, lane_words, t_max, tuning)
    if every_row:
        defines.append(("EVERY_ROW", 1))
    if x_source:
        defines.append(("X_SOURCE", x_source))
    groups = -(-n_rows // (shape.rows * (2 if pairs else 1)))
    return MatvecPlan(name, shape, groups, tuple(defines), pairs, lane_words, interleave, every_row)


def computes_every_row(kernel: str, lane_words: bool, t_max: int, tuning: MatmulTuning) -> bool:
    """Whether a GPU matvec of a step of t_max tokens computes every row of x (EVERY_ROW in matvec/constants.wgsl):
    the Q4_K one on word lanes (every_row_word_lanes), and the Q6_K one up to every_row_q6_k_max_tokens."""
    if kernel == "matvec_q4_k":
        return lane_words and tuning.every_row_word_lanes
    return kernel == "matvec_q6_k" and 1 < t_max <= tuning.every_row_q6_k_max_tokens


def stacked_matvec_shape(k: int, n_first: int, n_rows: int, t_max: int, normed: bool, max_threads: int,
                         tuning: MatmulTuning) -> MatvecShape:
    """The one split of a stacked Q4_K | Q6_K matvec (kernels/matvec_q4_k_q6_k.wgsl): wide_matvec_shape's for all
    the rows as Q4_K ones, rows a workgroup dividing the first matrix's so that each workgroup takes one matrix."""
    shape = tuning.matvec_split or wide_matvec_shape(k, n_rows, GGMLQuantizationType.Q4_K, False, t_max, tuning,
                                                     normed, max_threads)
    if n_first % shape.rows:
        shape = MatvecShape(shape.tpr, math.gcd(shape.rows, n_first))
    return shape


# -- matmul tiles -----------------------------------------------------------------------------------------------------

def four_token_tile(n_cols: int, t_max: int, glu: bool) -> MatmulTile:
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


def matmul_tile(k: int, n_cols: int, t_max: int, tuning: MatmulTuning, glu: bool = False,
                sms: int | None = None) -> MatmulTile:
    """The tile of the GPU matmul for n_cols y columns (weight rows; gate rows with GLU), rows of k values and t_max
    tokens, and its k split.

    Steps of 128 tokens or more take tuning.long_step_tile (8 tokens x 8 rows a thread), shorter ones
    four_token_tile's. k is split into parts of about matmul_part values (short k loops run fastest; the GLU, past
    glu_part_split_max_tokens tokens, keeps one dispatch and splits only for workgroups, or in 2 with the 8 x 8 tile
    unless its tiles fill every SM twice over: glu_fills_sms), then further while there are fewer than
    matmul_min_groups workgroups. On a GPU whose SM count is known (`sms`), the 8 x 8 tile's split (no GLU) drops to
    the one that fills whole rounds of workgroups (whole_waves_split).
    """
    if tuning.tile is not None:
        return tuning.tile
    tile = tuning.long_step_tile if t_max >= 128 else four_token_tile(n_cols, t_max, glu)
    width = n_cols * (2 if glu else 1)

    def can_double(split: int, min_part: int) -> bool:
        return (split < tuning.matmul_max_split and k % (2 * split * tile.k_chunk) == 0
                and k // (2 * split) >= min_part and 2 * split * t_max * width * 4 <= tuning.matmul_max_parts_bytes)

    split = 1
    while (not glu or t_max <= tuning.glu_part_split_max_tokens) and can_double(split, tuning.matmul_part):
        split *= 2
    if (glu and tile.thread_tokens == 8 and can_double(split, tuning.matmul_part)
            and not glu_fills_sms(tile, n_cols, t_max, sms)):
        split = 2
    while (tile.groups(n_cols, t_max, glu) * split < tuning.matmul_min_groups
           and can_double(split, tuning.matmul_min_part)):
        split *= 2
    if sms and tile.thread_tokens == 8 and not glu:
        split = whole_waves_split(tile, k, n_cols, t_max, split, sms, tuning)
    return tile._replace(split=split)


def whole_waves_split(tile: MatmulTile, k: int, n_cols: int, t_max: int, most: int, sms: int,
                      tuning: MatmulTuning) -> int:
    """The k split, at most `most`, of the 8 x 8 tile (no GLU) on a GPU of `sms` SMs that a fit of the tile's
    sweep says finishes first: the busiest SM runs ceil(workgroups / sms) of them, two at a time (pair_time), each
    over k / split values, and a split's parts cost a reduce (split_k_steps) and their bytes
    (parts_bytes_per_k_step). A split that leaves most SMs one workgroup wastes them, one that adds a last round of a
    few workgroups waits for it. Any split up to the row's chunks, not only divisors (parts differ by a chunk at
    most); never more parts than matmul_tile's own rule, whose shorter parts ran slower in models than the fit
    said."""
    tiles = tile.groups(n_cols, t_max, False)
    chunks = k // tile.k_chunk

    def cost(split: int) -> float:
        busiest = -(-tiles * split // sms)
        rounds = (busiest // 2) * tuning.pair_time + busiest % 2
        parts = 0 if split == 1 else tuning.split_k_steps + split * t_max * n_cols * 8 / tuning.parts_bytes_per_k_step
        return rounds * -(-chunks // split) * tile.k_chunk + parts  # the longest part's k steps

    return min(range(1, min(most, chunks) + 1), key=cost)


def glu_fills_sms(tile: MatmulTile, n_cols: int, t_max: int, sms: int | None) -> bool:
    """Whether the GLU's tiles, k unsplit, give every SM of a GPU of known SM count two rounds of two workgroups:
    then its k stays whole, saving the parts' round trip and the reduce's dispatch."""
    return bool(sms) and tile.groups(n_cols, t_max, True) >= 4 * sms


def int8_tile(k: int, n_cols: int, t_max: int, tuning: MatmulTuning, glu: bool = False) -> MatmulTile | None:
    """The tile of matmul/tiles_i8.wgsl (4 tokens x 8 rows a thread, 32-value chunks), or None where it has no
    tile: steps of up to 32 tokens, whose tiles have too few threads for a load per row and token. The int8 tiles
    split k less than the f32 ones: only where the tiles alone make fewer than int8_few_groups workgroups, then
    until there are int8_split_groups."""
    if tuning.int8_tile is not None:
        return tuning.int8_tile
    if t_max <= 32:
        return None
    tile = four_token_tile(n_cols, t_max, glu)._replace(thread_rows=8, k_chunk=32)
    groups = tile.groups(n_cols, t_max, glu)
    split = 1
    if not glu and groups < tuning.int8_few_groups:
        while (groups * split < tuning.int8_split_groups and split < tuning.matmul_max_split
               and k % (64 * split) == 0 and k // (2 * split) >= tuning.matmul_part
               and 2 * split * t_max * n_cols * 4 <= tuning.matmul_max_parts_bytes):
            split *= 2
    return tile._replace(split=split)


def tiles_in_f16(traits: DeviceTraits, qtype: GGMLQuantizationType, tuning: MatmulTuning) -> bool:
    """Whether the GPU matmul keeps its tiles in f16: a type of tuning.f16_tile_types on an adapter with
    "shader-f16"."""
    return traits.f16 and qtype in tuning.f16_tile_types


def plan_tiles(weight: WeightShape, n_rows: int, t_max: int, glu: bool, traits: DeviceTraits,
               tuning: MatmulTuning) -> TilePlan:
    """The f32 (or f16) tiles of a GPU matmul over n_rows y columns, checked against the kernel and the device."""
    tile = matmul_tile(weight.k, n_rows, t_max, tuning, glu, traits.sms)
    f16 = tiles_in_f16(traits, weight.qtype, tuning)
    problem = tile.problem(weight.k, glu)
    if problem:
        raise ValueError(f"{weight.name}: matmul tile {tile}: the kernel needs {problem}")
    if tile.storage_bytes(f16) > traits.workgroup_storage_bytes or tile.threads > traits.max_invocations:
        raise ValueError(f"{weight.name}: matmul tile {tile} exceeds the adapter's workgroup limits")
    defines = (("ENTRY", "tiles"), ("TILE", "f16" if f16 else "f32"), ("BT", tile.tokens), ("BR", tile.rows),
               ("RR", tile.thread_rows), ("TT", tile.thread_tokens), ("BK", tile.k_chunk), ("SPLIT", tile.split),
               ("GROUP_LOADS", "q4_k_vec4" if weight.qtype in VEC4_TILE_TYPES else "words"))
    return TilePlan(tile, tile.groups(n_rows, t_max, glu), defines, f16=f16)


def plan_int8_tiles(weight: WeightShape, n_rows: int, t_max: int, glu: bool, tuning: MatmulTuning,
                    quantised_input: bool = False) -> TilePlan:
    """The int8 tiles of a GPU matmul over n_rows y columns, checked against the kernel; quantised_input: x is a
    QuantisedActivation, its q and (d, sum) pairs in one row (X_ROW_VEC4, X_ROW_PAIRS, X_PAIRS_AT)."""
    tile = int8_tile(weight.k, n_rows, t_max, tuning, glu)
    if tile is None or weight.qtype not in INT8_TYPES:
        raise ValueError(f"{weight.name}: no int8 matmul for {weight.qtype.name} at {t_max} tokens")
    if weight.k % (32 * tile.split) or tile.rows % 32 or tile.tokens % 4 or tile.rows + tile.tokens > tile.threads:
        raise ValueError(f"{weight.name}: int8 matmul tile {tile} does not fit K = {weight.k}")
    defines: Defines = (("ENTRY", "tiles_i8"), ("BT", tile.tokens), ("BR", tile.rows), ("SPLIT", tile.split))
    if quantised_input:
        k = weight.k
        defines += (("X_ROW_VEC4", 5 * k // 64), ("X_ROW_PAIRS", 5 * k // 32), ("X_PAIRS_AT", k // 8))
    return TilePlan(tile, tile.groups(n_rows, t_max, glu), defines, int8=True)


def plan_whole_rows_matmul(qtype: GGMLQuantizationType, n_rows: int, t_max: int, glu: bool) -> WholeRowsPlan:
    """The software adapters' matmul over n_rows y columns of a weight of type qtype."""
    thread_tokens = min(8, t_max)
    groups = -(-n_rows // (64 if glu else 128)) * -(-t_max // (8 * thread_tokens))
    held = HELD_LOAD_TYPES.get(qtype, "groups")
    return WholeRowsPlan(thread_tokens, groups, (("ENTRY", "whole_rows"), ("WG", 64), ("THREAD_TOKENS", thread_tokens),
                                                 ("HELD_LOADS", held)))


# -- one shard's dispatch -------------------------------------------------------------------------------------------

def plan_shard(
    weight: WeightShape, plan: LinearPlan, x: LinearInput, x_width: int, t_max: int, *, n_rows: int,
    row_start: int, y_stride: int, glu: bool, q8_output: bool, traits: DeviceTraits, tuning: MatmulTuning,
    residual_output: bool = False,
) -> ShardPlan:
    """The dispatch of a linear over n_rows rows of one shard (y columns row_start onwards of y_stride; with glu,
    the gate rows, their up rows following): a matvec, tiles or whole rows, by the linear's plan, what x is (of
    x_width values a row) and whether y is quantised (q8_output) or added to a residual stream (residual_output). A
    quantised or (pre)normalised input, or a quantised or residual output, takes a GPU matvec; a quantised input of a
    prompt the int8 tiles."""
    if x is LinearInput.QUANTISED and plan.kernel is LinearKernel.MATMUL and not q8_output:
        # a prompt's input quantised by the norm before it (quantises_prompt_input): the int8 tiles read it as it is
        if x_width != weight.k or not uses_int8_tiles(weight, plan, t_max, n_rows, glu, tuning):
            raise ValueError(f"{weight.name}: a quantised input of a matmul needs int8 tiles on {x_width} values "
                             f"(int8 matmuls on a GPU, a type of INT8_TYPES, more than 32 tokens)")
        return plan_int8_tiles(weight, n_rows, t_max, glu, tuning, quantised_input=True)
    if x in (LinearInput.NORMED, LinearInput.PRENORMED, LinearInput.QUANTISED) or q8_output or residual_output:
        if plan.kernel is not LinearKernel.MATVEC or plan.whole_rows:
            raise ValueError(f"{weight.name}: a normalised or quantised input, or a quantised or residual output, "
                             "needs a GPU matvec")
        if q8_output and (n_rows % 32 or row_start % 32 or y_stride % 64):
            raise ValueError(f"{weight.name}: a quantised output needs whole 32-column blocks and rows of a "
                             f"multiple of 64 values")
    if residual_output and (glu or q8_output or row_start or y_stride != n_rows or x is not LinearInput.F32):
        raise ValueError(f"{weight.name}: a residual output takes all of y's columns, from an f32 input, no GLU")
    if x is LinearInput.PRENORMED:
        if q8_output:
            raise ValueError(f"{weight.name}: a prenormed input has no quantised output")
        return plan_matvec(weight, n_rows, plan.subgroups, False, glu, t_max, tuning, x_source="prenormed")
    if x is LinearInput.QUANTISED:
        if weight.qtype not in INT8_MATVEC_KERNELS or x_width != weight.k:
            raise ValueError(f"{weight.name}: no int8 matvec for {weight.qtype.name} on a quantised input of "
                             f"width {x_width}")
        return plan_matvec(weight, n_rows, plan.subgroups, False, glu, t_max, tuning, True, q8_output,
                           x_source="q8_buffer")
    if x is LinearInput.NORMED:
        if not normed_input_fits(weight.k, t_max, tuning):
            raise ValueError(f"{weight.name}: a normalised input needs a GPU matvec of at most "
                             f"{tuning.normed_input_bytes} bytes of input and {tuning.normed_input_max_width} "
                             "values a row (see folds_norms)")
        int8 = int8_matvec(weight, plan, t_max, glu, tuning)
        return plan_matvec(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, tuning, int8, q8_output,
                           normed=True, max_threads=any_size_threads(traits, plan),
                           x_source="q8_normed" if int8 else "normed")
    if plan.kernel is LinearKernel.MATVEC:
        int8 = int8_matvec(weight, plan, t_max, glu, tuning)
        if plan.whole_rows:  # f32 x (the int8 kernel quantises it itself), from a uniform binding where it is one
            x_source = "uniform" if x is LinearInput.F32_UNIFORM else "direct"
        else:
            x_source = "q8_direct" if int8 else "direct"
        return plan_matvec(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, tuning, int8, q8_output,
                           x_source=x_source, residual_output=residual_output)
    if x is LinearInput.INT8:
        return plan_int8_tiles(weight, n_rows, t_max, glu, tuning)
    if plan.whole_rows:
        return plan_whole_rows_matmul(weight.qtype, n_rows, t_max, glu)
    return plan_tiles(weight, n_rows, t_max, glu, traits, tuning)


# -- fusions a program may choose (gpu/ops/matmul.py's predicates of the same names ask these) --------------------

def folds_norms(width: int, t_max: int, traits: DeviceTraits, tuning: MatmulTuning) -> bool:
    """Whether linears take a NormedInput of this width by default: matvecs of few tokens on a GPU (software
    adapters run whole-row matvecs, which read x directly)."""
    return not traits.software and normed_input_fits(width, t_max, tuning)


def prenorms_inputs(width: int, t_max: int, traits: DeviceTraits, int8_matmuls: bool, tuning: MatmulTuning) -> bool:
    """Whether the matvec writing a block's output (o, down) adds it to the residual and makes the next norm's
    input there (a PrenormedInput), for a model whose blocks add their outputs unnormalised: one-token steps
    (prenormed_max_tokens) on a GPU with f32 inputs (under int8 matmuls the residual norm quantises the
    feed-forward's), of widths from prenormed_min_width on, or narrower ones too wide for the next matvecs to
    normalise their input themselves (folds_norms)."""
    return (tuning.prenormed_inputs and not traits.software and not int8_matmuls
            and t_max <= min(tuning.prenormed_max_tokens, tuning.matvec_max_tokens)
            and (width >= tuning.prenormed_min_width or not folds_norms(width, t_max, traits, tuning)))


def quantises_ffn_input(gate_up: WeightShape, t_max: int, traits: DeviceTraits, int8_matmuls: bool,
                        tuning: MatmulTuning) -> bool:
    """Whether a feed-forward's input should be quantised by the residual norm before it: int8 matmuls on a GPU,
    a one-shard gate-up of a width that is a multiple of 64, for which a quantised input pays."""
    return (int8_glu_matvec(traits, int8_matmuls, len(gate_up.shards)) and gate_up.k % 64 == 0
            and quantised_input_pays(gate_up, t_max, tuning))


def quantises_glu_output(gate_up: WeightShape, down: WeightShape, t_max: int, normed_input: bool,
                         traits: DeviceTraits, int8_matmuls: bool, tuning: MatmulTuning) -> bool:
    """Whether a gate-up should write its output quantised for an int8 down projection: int8 matmuls on a GPU, a
    one-shard gate-up of a width that is a multiple of 64, a down projection for which a quantised input pays; not
    where the gate-up normalises its input (normed_input) at a split of other than whole 32-row blocks, which a
    quantised output needs: there the split lost costs what the int8 down saves."""
    if not (int8_glu_matvec(traits, int8_matmuls, len(gate_up.shards)) and (gate_up.n // 2) % 64 == 0
            and down.k == gate_up.n // 2 and quantised_input_pays(down, t_max, tuning)):
        return False
    return not (normed_input and wide_normed_rows(gate_up, t_max, traits, int8_matmuls, tuning) % 32)


def wide_normed_rows(gate_up: WeightShape, t_max: int, traits: DeviceTraits, int8_matmuls: bool,
                     tuning: MatmulTuning) -> int:
    """Rows a workgroup of a gate-up's matvec on a NormedInput with an f32 output where it runs the wide K-quant
    kernel, else 32 (the other kernels' splits take a quantised output's blocks at no cost measured)."""
    plan = plan_linear(gate_up.name, traits, tuning, int8_matmuls, t_max)
    matvec = plan_matvec(gate_up, gate_up.n // 2, plan.subgroups, plan.whole_rows, True, t_max, tuning,
                         int8_matvec(gate_up, plan, t_max, True, tuning), normed=True,
                         max_threads=any_size_threads(traits, plan))
    return matvec.shape.rows if matvec.kernel in WIDE_MATVEC_KERNELS.values() else 32


def quantises_prompt_input(weights: Sequence[WeightShape], t_max: int, traits: DeviceTraits, int8_matmuls: bool,
                           tuning: MatmulTuning) -> bool:
    """Whether the input of these linears (each reading all of it) should be quantised by the residual norm before
    them rather than by a quantize_q8 dispatch in each: where each runs the int8 tiles on rows of a multiple of 64
    values."""
    if any(w.k != weights[0].k for w in weights) or weights[0].k % 64:
        return False
    return all(uses_int8_tiles(w, plan_linear(w.name, traits, tuning, int8_matmuls, t_max), t_max, w.n, False, tuning)
               for w in weights)


def stacks_in_one_matvec(first: WeightShape, second: WeightShape, t_max: int, traits: DeviceTraits,
                         int8_matmuls: bool, tuning: MatmulTuning, subgroups: bool | None = None,
                         whole_rows: bool | None = None) -> bool:
    """Whether a Q4_K and a Q6_K matrix of one input (one shard each, rows of the same width) run as one matvec
    (kernels/matvec_q4_k_q6_k.wgsl): decode matvecs on a GPU with the wide K-quant kernels, under int8 matmuls too
    (the stacked f32 dispatch beats an int8 q|k matvec and an f32 v)."""
    if (first.qtype is not GGMLQuantizationType.Q4_K or second.qtype is not GGMLQuantizationType.Q6_K
            or first.k != second.k or len(first.shards) != 1 or len(second.shards) != 1 or not tuning.wide_matvec):
        return False
    plans = [plan_linear(w.name, traits, tuning, int8_matmuls, t_max, None, subgroups, whole_rows)
             for w in (first, second)]
    return all(p.kernel is LinearKernel.MATVEC and not p.whole_rows for p in plans)
