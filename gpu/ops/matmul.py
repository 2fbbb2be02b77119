"""Host side of the quantised matrix kernels: linear layers (plain, the fused gate-up GLU of Gemma's feed-forward,
two matrices of one input stacked) and embedding lookups over weights kept on the GPU in their GGUF block format
(no dequantisation at load). This module records dispatches; gpu/ops/matmul_plan.py decides kernels and splits
from shapes, the device's traits and the executor's MatmulTuning (gpu/ops/matmul_tuning.py).

Weight types: gpu.weights.SUPPORTED_TYPES, decoded in the shader by kernels/quant/<type>.wgsl. A weight is N rows of
K values (GGUF ne = [K, N]); K is a multiple of the type's block (32 for Q*_0 / Q*_1, 256 for the K-quants, 16 for
the float types); N is any. Activations are f32 row-major [T_MAX, width]; kernels compute the step's first
min(n_tokens, T_MAX) rows and leave the others untouched. Each weight shard gets its own dispatch writing its
columns of y; with GLU = 1 a dispatch reads gate row r and up row F + r and stores gelu_tanh(g) * u.

Kernels:
- kernels/matvec.wgsl and the K-quant kernels matvec_q4_k / matvec_q6_k.wgsl: decode, up to matvec_max_tokens
  tokens. Threads split each row's K and reduce once a row (by subgroups where the adapter has them); on software
  adapters whole rows a thread (matvec/whole_rows.wgsl; Q8_0 by aligned block pairs: matvec_q8_0_rows.wgsl).
  Steps of several tokens pair or interleave rows so threads share their loads of x.
- kernels/matmul.wgsl: prompts. On GPUs register tiles fed through workgroup memory (matmul/tiles.wgsl), k split
  over workgroups where the tiles alone are few, the parts added by kernels/matmul_reduce.wgsl or by the residual
  norm that reads them (SplitSums); on software adapters whole rows a thread (matmul/whole_rows.wgsl).
- int8 (Executor(int8_matmuls=True)): prompt tiles in 8-bit integers (matmul/tiles_i8.wgsl, dot4I8Packed) on x
  quantised per 32 values by kernels/quantize_q8.wgsl or by the residual norm before them (a QuantisedActivation);
  decode matvecs matvec_q4_k_i8 / matvec_q6_k_i8.wgsl where that pays, quantising x in each workgroup or reading a
  QuantisedActivation that a gate-up's epilogue or a residual norm wrote.
- kernels/matvec_q4_k_q6_k.wgsl: a Q4_K and a Q6_K matrix of one input in one decode dispatch.
- kernels/get_rows.wgsl: embedding rows (times a scale) for a u32 tensor of token ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType

from gpu.device import Device
from gpu.ops.matmul_plan import (
    INT8_MATVEC_KERNELS,
    VEC4_TILE_TYPES,
    WIDE_MATVEC_KERNELS,
    DeviceTraits,
    LinearKernel,
    LinearPlan,
    TilePlan,
    any_size_threads,
    block_values,
    int8_glu_matvec,
    int8_matvec,
    normed_input_fits,
    plan_int8_tiles,
    plan_linear,
    plan_matvec,
    plan_tiles,
    quantised_input_pays,
    stacked_matvec_shape,
    uses_int8_tiles,
    whole_rows_matmul,
)
from gpu.ops.matmul_tuning import MatmulTuning
from gpu.ops.quantised import QuantisedActivation, quantised_activation  # noqa: F401 (part of this module's API)
from gpu.ops.split_sums import SplitSums
from gpu.ops.transformer import gelu_mul
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight


def device_traits(device: Device) -> DeviceTraits:
    """What matmul planning needs from a device."""
    return DeviceTraits(software=device.is_software, subgroups=device.has("subgroup"), f16=device.has("shader-f16"),
                        sms=device.sms, max_invocations=device.limits.max_invocations,
                        workgroup_storage_bytes=device.limits.workgroup_storage_bytes)


def _tuning(builder: ProgramBuilder) -> MatmulTuning:
    return builder.executor.tuning


def _plan(builder: ProgramBuilder, weight: QuantWeight, t_max: int, kernel: LinearKernel | None = None,
          subgroups: bool | None = None, whole_rows: bool | None = None, int8: bool | None = None) -> LinearPlan:
    return plan_linear(weight.name, device_traits(builder.device), _tuning(builder), builder.executor.int8_matmuls,
                       t_max, kernel, subgroups, whole_rows, int8)


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


def folds_norms(builder: ProgramBuilder, width: int, t_max: int) -> bool:
    """Whether linears of this program take a NormedInput of this width by default: matvecs of few tokens on a GPU
    (software adapters run whole-row matvecs, which read x directly)."""
    return not builder.device.is_software and normed_input_fits(width, t_max, _tuning(builder))


def quantises_ffn_input(builder: ProgramBuilder, gate_up: QuantWeight, t_max: int) -> bool:
    """Whether a step's feed-forward input should be a QuantisedActivation written by its residual_norm dispatch
    (kernels/residual_norm_q8.wgsl) rather than an f32 one: where the executor asks for int8 matmuls, on a GPU, for
    decode matvecs, a one-shard gate-up for which a quantised input pays (matmul_plan.quantised_input_pays), of a
    width that is a multiple of 64. (Normalising and quantising in every workgroup of an int8 gate-up instead costs
    more.) Where the model folds the norm into an f32 gate-up's prologue instead (NormedInput, folds_norms), the
    fold is faster."""
    return (int8_glu_matvec(device_traits(builder.device), builder.executor.int8_matmuls, len(gate_up.shards))
            and gate_up.k % 64 == 0 and quantised_input_pays(gate_up, t_max, _tuning(builder)))


def quantises_glu_output(builder: ProgramBuilder, gate_up: QuantWeight, down: QuantWeight, t_max: int,
                         normed_input: bool = False) -> bool:
    """Whether a step's gate-up should write its output as a QuantisedActivation for an int8 down projection:
    where the executor asks for int8 matmuls, on a GPU, for decode matvecs, a one-shard gate-up of a width that is
    a multiple of 64, and a down projection for which a quantised input pays; not where the gate-up normalises its
    input (normed_input: a NormedInput) in the wide K-quant kernel at a split of other than whole 32-row blocks,
    which a quantised output needs (matvec/store_q8.wgsl): there the split lost costs what the int8 down saves."""
    tuning = _tuning(builder)
    traits = device_traits(builder.device)
    if not (int8_glu_matvec(traits, builder.executor.int8_matmuls, len(gate_up.shards))
            and (gate_up.n // 2) % 64 == 0 and down.k == gate_up.n // 2 and quantised_input_pays(down, t_max, tuning)):
        return False
    return not (normed_input and _wide_normed_rows(builder, gate_up, t_max) % 32)


def _wide_normed_rows(builder: ProgramBuilder, gate_up: QuantWeight, t_max: int) -> int:
    """Rows a workgroup of the gate-up's matvec on a NormedInput with an f32 output where it runs the wide K-quant
    kernel, else 32 (the other kernels' splits take the quantised output's blocks at no cost measured)."""
    tuning, traits = _tuning(builder), device_traits(builder.device)
    plan = _plan(builder, gate_up, t_max)
    matvec = plan_matvec(gate_up, gate_up.n // 2, plan.subgroups, plan.whole_rows, True, t_max, tuning,
                         int8_matvec(gate_up, plan, t_max, True, tuning), normed=True,
                         max_threads=any_size_threads(traits, plan))
    return matvec.shape.rows if matvec.kernel in WIDE_MATVEC_KERNELS.values() else 32


def quantises_prompt_input(builder: ProgramBuilder, weights: list[QuantWeight], t_max: int) -> bool:
    """Whether a step's input to these linears (each reading all of it) should be a QuantisedActivation written by
    the residual norm before them (kernels/residual_norm_q8.wgsl) rather than an f32 activation that each linear
    quantises with a quantize_q8 dispatch of its own: where each of them runs the int8 tiles (int8 matmuls asked
    for, a GPU, an INT8_TYPES weight, a step of more than 32 tokens) on rows of a multiple of 64 values. The tiles
    then read the same q, d and sums as quantize_q8 would have made (common/q8_block.wgsl)."""
    if any(w.k != weights[0].k for w in weights) or weights[0].k % 64:
        return False
    tuning = _tuning(builder)
    return all(uses_int8_tiles(w, _plan(builder, w, t_max), t_max, w.n, False, tuning) for w in weights)


def _check_normed_input(weight: QuantWeight, t_max: int, tuning: MatmulTuning) -> None:
    if not normed_input_fits(weight.k, t_max, tuning):
        raise ValueError(f"{weight.name}: a normalised input needs a GPU matvec of at most "
                         f"{tuning.normed_input_bytes} bytes of input (see folds_norms)")


def _normed_bindings(x: NormedInput, y: Tensor) -> list[Tensor]:
    """A matvec's bindings 2 to 7 on a NormedInput (matvec/normed_input.wgsl's, y at 3), after the step and the
    weight."""
    return [x.block_out, y, x.residual, x.post_weight, x.next_weight, x.residual_out]


def _check_weight(weight: QuantWeight) -> None:
    bv = block_values(weight.qtype)
    if weight.k % bv:
        raise ValueError(f"{weight.name}: K = {weight.k} is not a multiple of {bv} ({weight.qtype.name} kernels)")


def _check_activation(tensor: Tensor, width: int, t_max: int, what: str) -> None:
    if tensor.dtype != "f32" or len(tensor.shape) != 2 or tensor.shape[1] != width or tensor.shape[0] < t_max:
        raise ValueError(f"{what} {tensor} must be f32 [>= {t_max}, {width}]")


def _check_input(x: Tensor | NormedInput | QuantisedActivation, width: int, t_max: int, what: str) -> None:
    if isinstance(x, QuantisedActivation):
        t = x.tensor
        if x.width != width or t.dtype != "u32" or t.shape[0] < t_max or t.shape[1] != width * 5 // 16:
            raise ValueError(f"{what} {t} must be a quantised activation of [>= {t_max}, {width}]")
        return
    _check_activation(x.block_out if isinstance(x, NormedInput) else x, width, t_max, what)


def _dispatch(
    builder: ProgramBuilder, plan: LinearPlan, weight: QuantWeight, shard: Tensor,
    x: Tensor | NormedInput | Int8Input | QuantisedActivation, y: Tensor | QuantisedActivation, t_max: int, *,
    first_row: int, n_rows: int, row_start: int, y_stride: int, glu: bool = False, leave_parts: bool = False,
) -> SplitSums | None:
    """The dispatches of y[:, row_start + r] for rows first_row + r, r < n_rows, of one shard (with glu,
    gelu_tanh(gate) * up, the up rows following the n_rows gate rows): one, or two for a matmul split
    over k (the parts, then matmul_reduce; with leave_parts, the parts alone, returned). A QuantisedActivation x
    or y takes a GPU matvec."""
    tuning = _tuning(builder)
    constants: dict[str, int | str] = {
        "WEIGHT_TYPE": weight.type_name, "K": weight.k, "N_ROWS": n_rows, "FIRST_ROW": first_row,
        "ROW_START": row_start, "Y_STRIDE": y_stride, "T_MAX": t_max, "GLU": int(glu),
    }
    q8_output = isinstance(y, QuantisedActivation)
    y_tensor = y.tensor if isinstance(y, QuantisedActivation) else y
    if isinstance(x, QuantisedActivation) and plan.kernel is LinearKernel.MATMUL and isinstance(y, Tensor):
        # a prompt's input quantised by the norm before it (quantises_prompt_input): the int8 tiles read it as it is
        if x.width != weight.k or not uses_int8_tiles(weight, plan, t_max, n_rows, glu, tuning):
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
        matvec = plan_matvec(weight, n_rows, plan.subgroups, False, glu, t_max, tuning, True, q8_output)
        del constants["WEIGHT_TYPE"]
        builder.dispatch(matvec.kernel, constants | dict(matvec.defines) | {"X_SOURCE": "q8_buffer"},
                         [builder.step, shard, x.tensor, y_tensor], workgroup_grid(matvec.groups))
        return None
    if isinstance(x, NormedInput):
        _check_normed_input(weight, t_max, tuning)
        int8 = int8_matvec(weight, plan, t_max, glu, tuning)
        matvec = plan_matvec(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, tuning, int8, q8_output,
                             normed=True, max_threads=any_size_threads(device_traits(builder.device), plan))
        constants |= dict(matvec.defines) | {"X_SOURCE": "q8_normed" if int8 else "normed", "EPS": x.eps}
        if matvec.kernel != "matvec":
            del constants["WEIGHT_TYPE"]
        builder.dispatch(matvec.kernel, constants, [builder.step, shard, *_normed_bindings(x, y_tensor)],
                         workgroup_grid(matvec.groups))
        return None
    if plan.kernel is LinearKernel.MATVEC:
        int8 = int8_matvec(weight, plan, t_max, glu, tuning)
        matvec = plan_matvec(weight, n_rows, plan.subgroups, plan.whole_rows, glu, t_max, tuning, int8, q8_output)
        extra = dict(matvec.defines)
        if matvec.kernel != "matvec_q8_0_rows":
            extra |= {"X_SOURCE": "q8_direct" if int8 else "direct"}
        if matvec.kernel != "matvec":
            del constants["WEIGHT_TYPE"]
        builder.dispatch(matvec.kernel, constants | extra, [builder.step, shard, x, y_tensor],
                         workgroup_grid(matvec.groups))
        return None
    assert isinstance(y, Tensor)
    if isinstance(x, Int8Input):
        return _int8_dispatch(builder, weight, shard, x, y, t_max, constants, n_rows, row_start, y_stride, glu,
                              leave_parts)
    if plan.whole_rows:
        thread_tokens, groups = whole_rows_matmul(n_rows, t_max, glu)
        builder.dispatch("matmul", constants | {"ENTRY": "whole_rows", "WG": 64, "THREAD_TOKENS": thread_tokens},
                         [builder.step, shard, x, y], workgroup_grid(groups))
        return None
    tiles = plan_tiles(weight, n_rows, t_max, glu, device_traits(builder.device), tuning)
    tile = tiles.tile
    constants |= {"ENTRY": "tiles", "TILE": "f16" if tiles.f16 else "f32", "BT": tile.tokens, "BR": tile.rows,
                  "RR": tile.thread_rows, "TT": tile.thread_tokens, "BK": tile.k_chunk, "SPLIT": tile.split,
                  "GROUP_LOADS": "q4_k_vec4" if weight.qtype in VEC4_TILE_TYPES else "words"}
    return _tiles_dispatch(builder, weight, constants, tiles, [builder.step, shard, x], y, [], t_max, n_rows,
                           row_start, y_stride, glu, leave_parts)


def _tiles_dispatch(
    builder: ProgramBuilder, weight: QuantWeight, constants: dict[str, int | str], tiles: TilePlan,
    inputs: list[Tensor], y: Tensor, after: list[Tensor], t_max: int, n_rows: int, row_start: int, y_stride: int,
    glu: bool, leave_parts: bool = False,
) -> SplitSums | None:
    """A tile entry's dispatch (matmul/tiles.wgsl or tiles_i8.wgsl), bound as [*inputs, y, *after]; where the
    tile splits k, it writes a parts scratch instead and kernels/matmul_reduce.wgsl adds the parts into y, or,
    with leave_parts (no GLU, all of y's columns), the parts are returned for the consumer to add."""
    tile = tiles.tile
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
    tiles = plan_int8_tiles(weight, n_rows, t_max, glu, _tuning(builder))
    tile = tiles.tile
    constants = constants | {"ENTRY": "tiles_i8", "BT": tile.tokens, "BR": tile.rows, "SPLIT": tile.split}
    if isinstance(x, QuantisedActivation):
        k = weight.k
        constants |= {"X_ROW_VEC4": 5 * k // 64, "X_ROW_PAIRS": 5 * k // 32, "X_PAIRS_AT": k // 8}
        q, scales = x.tensor, x.tensor
    else:
        q, scales = x.q, x.scales
    return _tiles_dispatch(builder, weight, constants, tiles, [builder.step, shard, q], y, [scales], t_max, n_rows,
                           row_start, y_stride, glu, leave_parts)


def linear(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor | NormedInput | QuantisedActivation, y: Tensor,
    t_max: int, *,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    int8: bool | None = None, leave_parts: bool = False,
) -> Tensor | SplitSums:
    """y[t, :] = W x[t, :] for the step's first min(n_tokens, t_max) tokens: x [t_max, K] -> y [t_max, N].
    Returns where the values are: y, or with leave_parts, for a weight of one shard whose matmul splits k, its
    parts (SplitSums) for a consumer that adds them (the residual norms), y then left unwritten.

    kernel: matvec when t_max <= the tuning's matvec_max_tokens (software_matvec_max_tokens with whole rows),
    else matmul, unless given. subgroups: the matvec reduction by subgroup shuffles, by default where the device
    has the "subgroup" feature. whole_rows: matvec and matmul by whole rows per thread (the software adapters'
    kernels), by default on a software adapter; on a GPU the split rows and workgroup-memory tiles are faster.
    One dispatch per weight shard. x may be a NormedInput where folds_norms says so (each shard's dispatch
    computes it; the same residual_out values are written by each), or a QuantisedActivation (an int8 matvec:
    INT8_MATVEC_KERNELS weights). int8: GPU matmul tiles in 8-bit integers for INT8_TYPES weights (x quantised
    once, shared by the shards), by default where the executor asks for them (int8_matmuls) and the adapter is
    not a software one. Kernels and splits come from gpu/ops/matmul_plan.py with the executor's tuning.
    """
    _check_weight(weight)
    _check_input(x, weight.k, t_max, "x")
    _check_activation(y, weight.n, t_max, "y")
    plan = _plan(builder, weight, t_max, kernel, subgroups, whole_rows, int8)
    tuning = _tuning(builder)
    source: Tensor | NormedInput | Int8Input | QuantisedActivation = x
    if isinstance(x, Tensor) and all(uses_int8_tiles(weight, plan, t_max, shard.n_rows, False, tuning)
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
    (SplitSums), which a residual norm adds as it reads them instead of a matmul_reduce dispatch (one dispatch
    and one round trip of the sums fewer). choices: linear's keyword arguments."""
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
        if isinstance(x, Tensor) and uses_int8_tiles(weight, plan, t_max, f, True, _tuning(builder)):
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
    dispatch beats an int8 q|k matvec and an f32 v."""
    if (first.qtype is not GGMLQuantizationType.Q4_K or second.qtype is not GGMLQuantizationType.Q6_K
            or first.k != second.k or len(first.shards) != 1 or len(second.shards) != 1
            or not _tuning(builder).wide_matvec):
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
    tuning = _tuning(builder)
    shape = stacked_matvec_shape(first.k, first.n, n_rows, t_max, normed,
                                 any_size_threads(device_traits(builder.device), plan), tuning)
    constants: dict[str, int | str] = {
        "K": first.k, "N_ROWS": n_rows, "N_ROWS_A": first.n, "FIRST_ROW": 0, "ROW_START": 0, "Y_STRIDE": n_rows,
        "T_MAX": t_max, "ENTRY": "reduce_subgroup" if plan.subgroups else "reduce_workgroup", "TPR": shape.tpr,
        "ROWS": shape.rows, "STORE": "row",
    }
    weights = [builder.step, first.shards[0].tensor]
    if normed:
        assert isinstance(x, NormedInput)
        _check_normed_input(first, t_max, tuning)
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
