"""Host side of the quantised matrix kernels: linear layers (plain, the fused gate-up GLU of Gemma's feed-forward,
two matrices of one input stacked) and embedding lookups over weights kept on the GPU in their GGUF block format
(no dequantisation at load). This module records dispatches; gpu/ops/matmul_plan.py decides kernels and splits
from shapes, the device's traits and the executor's MatmulTuning (gpu/ops/matmul_tuning.py).

Weight types: gpu.weights.SUPPORTED_TYPES, decoded in the shader by kernels/quant/<type>.wgsl. A weight is N rows of
K values (GGUF ne = [K, N]); K is a multiple of the type's block (32 for Q*_0 / Q*_1, 256 for the K-quants, 16 for
the float types); N is any. Activations are f32 row-major [T_MAX, width]; kernels compute the step's first
min(n_tokens, T_MAX) rows and leave the others untouched. Each weight shard gets its own dispatch writing its
columns of y; with GLU = 1 a dispatch reads gate row r and up row F + r and stores act(g) * u (matmul/glu.wgsl).

Kernels:
- kernels/matvec.wgsl and the K-quant kernels matvec_q4_k / matvec_q6_k.wgsl: decode, up to matvec_max_tokens
  tokens. Threads split each row's K and reduce once a row (by subgroups where the adapter has them); on software
  adapters whole rows a thread (matvec/whole_rows.wgsl; Q8_0 by aligned block pairs, Q5_0 by block quads and Q4_K
  by 16-byte units: matvec_q8_0_rows, matvec_q5_0_rows and matvec_q4_k_rows.wgsl).
  Long rows and steps of several tokens pair rows, and rows interleave thread by thread (two for one token), so
  threads share their loads of x.
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

from gpu.device import Device
from gpu.ops import matmul_plan as planning
from gpu.ops.matmul_plan import (
    UNIFORM_X_BYTES,
    DeviceTraits,
    LinearInput,
    LinearKernel,
    LinearPlan,
    TilePlan,
    any_size_threads,
    block_values,
    normed_input_fits,
    plan_linear,
    plan_shard,
    stacked_matvec_shape,
    uses_int8_tiles,
)
from gpu.ops.matmul_tuning import MatmulTuning
from gpu.ops.quantised import QuantisedActivation, quantised_activation  # noqa: F401 (part of this module's API)
from gpu.ops.split_sums import SplitSums
from gpu.ops.transformer import glu_act, glu_mul
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Lifetime, Tensor
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
    post_weight None: r = residual + block_out (a block without post-norm).
    residual_out must be another tensor than residual: the matvec's other workgroups still read it."""

    block_out: Tensor
    post_weight: Tensor | None
    residual: Tensor
    next_weight: Tensor
    residual_out: Tensor
    eps: float


@dataclass(frozen=True)
class PrenormedInput:
    """A linear's input rms_norm(r) * next_weight as the matvec that added a block's output to the residual r left it
    (linear_residual, matvec/store_residual.wgsl): x = r * next_weight, and the sums of r^2 over each of `parts`
    groups of r's columns. The consumer matvec adds the sums and scales its row sums by 1 / rms(r)
    (matvec/x_prenormed.wgsl)."""

    x: Tensor  # f32 [t_max, width]: r * next_weight
    square_sums: Tensor  # f32 [t_max, parts]
    parts: int
    eps: float


def _context(builder: ProgramBuilder) -> tuple[DeviceTraits, bool, MatmulTuning]:
    """(device traits, int8 matmuls, tuning) of the program a builder records."""
    return device_traits(builder.device), builder.executor.int8_matmuls, _tuning(builder)


def folds_norms(builder: ProgramBuilder, width: int, t_max: int) -> bool:
    """Whether linears of this program take a NormedInput of this width by default: matvecs of few tokens on a GPU
    (software adapters run whole-row matvecs, which read x directly)."""
    return planning.folds_norms(width, t_max, device_traits(builder.device), _tuning(builder))


def prenorms_inputs(builder: ProgramBuilder, width: int, t_max: int) -> bool:
    """Whether a block's output matvec (o, down) should add its rows to the residual and make the next norm's input
    in its epilogue (linear_residual, a PrenormedInput), for a model whose blocks add their outputs unnormalised:
    one-token steps on a GPU with f32 inputs, on models wide enough that this beats folding the norm into the next
    matvecs (folds_norms) or too wide to fold it (matmul_plan.prenorms_inputs)."""
    return planning.prenorms_inputs(width, t_max, *_context(builder))


def quantises_ffn_input(builder: ProgramBuilder, gate_up: QuantWeight, t_max: int) -> bool:
    """Whether a step's feed-forward input should be a QuantisedActivation written by its residual_norm dispatch
    (kernels/residual_norm_q8.wgsl) rather than an f32 one: where the executor asks for int8 matmuls, on a GPU, for
    decode matvecs, a one-shard gate-up for which a quantised input pays (matmul_plan.quantised_input_pays), of a
    width that is a multiple of 64. (Normalising and quantising in every workgroup of an int8 gate-up instead costs
    more.) Where the model folds the norm into an f32 gate-up's prologue instead (NormedInput, folds_norms), the
    fold is faster."""
    return planning.quantises_ffn_input(gate_up, t_max, *_context(builder))


def quantises_glu_output(builder: ProgramBuilder, gate_up: QuantWeight, down: QuantWeight, t_max: int,
                         normed_input: bool = False) -> bool:
    """Whether a step's gate-up should write its output as a QuantisedActivation for an int8 down projection:
    where the executor asks for int8 matmuls, on a GPU, for decode matvecs, a one-shard gate-up of a width that is
    a multiple of 64, and a down projection for which a quantised input pays; not where the gate-up normalises its
    input (normed_input: a NormedInput) in the wide K-quant kernel at a split of other than whole 32-row blocks,
    which a quantised output needs (matvec/store_q8.wgsl): there the split lost costs what the int8 down saves."""
    return planning.quantises_glu_output(gate_up, down, t_max, normed_input, *_context(builder))


def quantises_prompt_input(builder: ProgramBuilder, weights: list[QuantWeight], t_max: int) -> bool:
    """Whether a step's input to these linears (each reading all of it) should be a QuantisedActivation written by
    the residual norm before them (kernels/residual_norm_q8.wgsl) rather than an f32 activation that each linear
    quantises with a quantize_q8 dispatch of its own: where each of them runs the int8 tiles (int8 matmuls asked
    for, a GPU, an INT8_TYPES weight, a step of more than 32 tokens) on rows of a multiple of 64 values. The tiles
    then read the same q, d and sums as quantize_q8 would have made (common/q8_block.wgsl)."""
    return planning.quantises_prompt_input(weights, t_max, *_context(builder))


def _check_normed_input(weight: QuantWeight, t_max: int, tuning: MatmulTuning) -> None:
    if not normed_input_fits(weight.k, t_max, tuning):
        raise ValueError(f"{weight.name}: a normalised input needs a GPU matvec of at most "
                         f"{tuning.normed_input_bytes} bytes of input and {tuning.normed_input_max_width} values a row "
                         "(see folds_norms)")


def _normed_bindings(x: NormedInput, y: Tensor) -> list[Tensor]:
    """A matvec's bindings 2 to 7 on a NormedInput (matvec/normed_input.wgsl's, y at 3), after the step and the
    weight."""
    post_weight = x.next_weight if x.post_weight is None else x.post_weight  # not read without a post-norm
    return [x.block_out, y, x.residual, post_weight, x.next_weight, x.residual_out]


def _check_weight(weight: QuantWeight) -> None:
    bv = block_values(weight.qtype)
    if weight.k % bv:
        raise ValueError(f"{weight.name}: K = {weight.k} is not a multiple of {bv} ({weight.qtype.name} kernels)")


def _check_activation(tensor: Tensor, width: int, t_max: int, what: str) -> None:
    if tensor.dtype != "f32" or len(tensor.shape) != 2 or tensor.shape[1] != width or tensor.shape[0] < t_max:
        raise ValueError(f"{what} {tensor} must be f32 [>= {t_max}, {width}]")


LinearSource = Tensor | NormedInput | PrenormedInput | QuantisedActivation  # what a linear reads as x


def _check_input(x: LinearSource, width: int, t_max: int, what: str) -> None:
    if isinstance(x, PrenormedInput):
        _check_activation(x.x, width, t_max, what)
        sums = x.square_sums
        if sums.dtype != "f32" or sums.shape[0] < t_max or sums.shape[1] != x.parts:
            raise ValueError(f"{what}'s sums {sums} must be f32 [>= {t_max}, {x.parts}]")
        return
    if isinstance(x, QuantisedActivation):
        t = x.tensor
        if x.width != width or t.dtype != "u32" or t.shape[0] < t_max or t.shape[1] != width * 5 // 16:
            raise ValueError(f"{what} {t} must be a quantised activation of [>= {t_max}, {width}]")
        return
    _check_activation(x.block_out if isinstance(x, NormedInput) else x, width, t_max, what)


def _input_kind(builder: ProgramBuilder, x: LinearSource | Int8Input) -> tuple[LinearInput, int]:
    """What a dispatch reads as x, and its values a row."""
    if isinstance(x, NormedInput):
        return LinearInput.NORMED, x.block_out.shape[1]
    if isinstance(x, PrenormedInput):
        return LinearInput.PRENORMED, x.x.shape[1]
    if isinstance(x, Int8Input):
        return LinearInput.INT8, x.q.shape[1] * 4
    if isinstance(x, QuantisedActivation):
        return LinearInput.QUANTISED, x.width
    uniform = builder.uniform_activations and x.lifetime is Lifetime.ACTIVATION and x.nbytes <= UNIFORM_X_BYTES
    return LinearInput.F32_UNIFORM if uniform else LinearInput.F32, x.shape[1]


def _dispatch(
    builder: ProgramBuilder, plan: LinearPlan, weight: QuantWeight, shard: Tensor, x: LinearSource | Int8Input,
    y: Tensor | QuantisedActivation, t_max: int, *,
    first_row: int, n_rows: int, row_start: int, y_stride: int, glu: bool = False, leave_parts: bool = False,
    activation: str = "gelu_tanh", residual_output: list[Tensor] | None = None,
) -> SplitSums | None:
    """The dispatches of y[:, row_start + r] for rows first_row + r, r < n_rows, of one shard (with glu,
    activation(gate) * up, the up rows following the n_rows gate rows), as matmul_plan.plan_shard plans them: one,
    or two for a matmul split over k (the parts, then matmul_reduce; with leave_parts, the parts alone,
    returned). residual_output: y is a residual stream the rows are added to, and these tensors (the next norm's
    weight, the normed output and its sums of squares) bind after it (matvec/store_residual.wgsl)."""
    kind, width = _input_kind(builder, x)
    y_tensor = y.tensor if isinstance(y, QuantisedActivation) else y
    shard_plan = plan_shard(weight, plan, kind, width, t_max, n_rows=n_rows, row_start=row_start, y_stride=y_stride,
                            glu=glu, q8_output=isinstance(y, QuantisedActivation),
                            traits=device_traits(builder.device), tuning=_tuning(builder),
                            residual_output=residual_output is not None)
    # the kernels that decode any weight type take it as a define; the others are written for theirs
    any_type = {"WEIGHT_TYPE": weight.type_name} if shard_plan.kernel in ("matvec", "matmul") else {}
    constants: dict[str, int | str] = any_type | {
        "K": weight.k, "N_ROWS": n_rows, "FIRST_ROW": first_row, "ROW_START": row_start, "Y_STRIDE": y_stride,
        "T_MAX": t_max, "GLU": int(glu),
    } | ({"GLU_ACT": glu_act(activation)} if glu and activation != "gelu_tanh" else {}) | dict(shard_plan.defines)
    if isinstance(shard_plan, TilePlan):
        assert isinstance(y_tensor, Tensor) and not isinstance(x, NormedInput)
        if isinstance(x, Int8Input):
            inputs, after = [builder.step, shard, x.q], [x.scales]
        elif isinstance(x, QuantisedActivation):  # both input bindings on its one tensor
            inputs, after = [builder.step, shard, x.tensor], [x.tensor]
        else:
            inputs, after = [builder.step, shard, x], []
        return _tiles_dispatch(builder, weight, constants, shard_plan, inputs, y_tensor, after, t_max, n_rows,
                               row_start, y_stride, glu, leave_parts)
    if isinstance(x, NormedInput):
        constants["EPS"] = x.eps
        if x.post_weight is None:
            constants["POST_NORM"] = False
        tensors = [builder.step, shard, *_normed_bindings(x, y_tensor)]
    elif isinstance(x, PrenormedInput):
        constants |= {"EPS": x.eps, "PARTS": x.parts}
        tensors = [builder.step, shard, x.x, y_tensor, x.square_sums]
    else:
        tensors = [builder.step, shard, x.tensor if isinstance(x, QuantisedActivation) else x, y_tensor,
                   *(residual_output or [])]
    builder.dispatch(shard_plan.kernel, constants, tensors, workgroup_grid(shard_plan.groups))
    return None


def _tiles_dispatch(
    builder: ProgramBuilder, weight: QuantWeight, constants: dict[str, int | str], tiles: TilePlan,
    inputs: list[Tensor], y: Tensor, after: list[Tensor], t_max: int, n_rows: int, row_start: int, y_stride: int,
    glu: bool, leave_parts: bool = False,
) -> SplitSums | None:
    """A tile entry's dispatch (matmul/tiles.wgsl or tiles_i8.wgsl), bound as [*inputs, y, *after]; where the
    tile splits k, it writes a parts scratch instead and kernels/matmul_reduce.wgsl adds the parts into y, or,
    with leave_parts (no GLU, all of y's columns), the parts are returned for the consumer to add."""
    split = tiles.tile.split
    groups = workgroup_grid(tiles.groups)
    if split == 1:
        builder.dispatch("matmul", constants, [*inputs, y, *after], groups)
        return None
    width = n_rows * (2 if glu else 1)
    parts = builder.activation(f"{weight.name}.parts", (split * t_max, width))
    builder.dispatch("matmul", constants | {"ROW_START": 0, "Y_STRIDE": width}, [*inputs, parts, *after], groups)
    if leave_parts:
        if glu or row_start or y_stride != n_rows:
            raise ValueError(f"{weight.name}: only a plain linear's whole output can be left as parts")
        return SplitSums(parts, split, t_max)
    reduce = {"N_ROWS": n_rows, "ROW_START": row_start, "Y_STRIDE": y_stride, "T_MAX": t_max, "SPLIT": split,
              "GLU": int(glu)} | {key: constants[key] for key in ("GLU_ACT",) if key in constants}
    builder.dispatch("matmul_reduce", reduce, [builder.step, parts, y], workgroup_grid(-(-t_max * n_rows // 256)))
    return None


def linear(
    builder: ProgramBuilder, weight: QuantWeight, x: LinearSource, y: Tensor,
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
    computes it; the same residual_out values are written by each), a PrenormedInput where prenorms_inputs says so,
    or a QuantisedActivation (an int8 matvec:
    matmul_plan.INT8_MATVEC_KERNELS weights). int8: GPU matmul tiles in 8-bit integers for INT8_TYPES weights
    (x quantised once, shared by the shards), by default where the executor asks for them (int8_matmuls) and the
    adapter is not a software one. Kernels and splits come from gpu/ops/matmul_plan.py with the executor's tuning.
    """
    _check_weight(weight)
    _check_input(x, weight.k, t_max, "x")
    _check_activation(y, weight.n, t_max, "y")
    plan = _plan(builder, weight, t_max, kernel, subgroups, whole_rows, int8)
    tuning = _tuning(builder)
    source: LinearSource | Int8Input = x
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
    builder: ProgramBuilder, weight: QuantWeight, x: LinearSource, name: str,
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


def linear_residual(
    builder: ProgramBuilder, weight: QuantWeight, x: Tensor, residual: Tensor, next_weight: Tensor, eps: float,
    name: str, t_max: int, *, subgroups: bool | None = None, whole_rows: bool | None = None,
) -> PrenormedInput:
    """residual += x W^T (a block's output projection, o or down, added to the residual stream r), and the next
    norm's input rms_norm(r) * next_weight for the matvecs that read it, as a PrenormedInput: one matvec dispatch
    whose epilogue (matvec/store_residual.wgsl) also writes r * next_weight (tensor `name`) and its workgroups'
    sums of r^2, where prenorms_inputs says so. The residual norm then takes no dispatch of its own. A weight of
    one shard, whose N is the residual's width; subgroups and whole_rows as for `linear` (a GPU matvec only)."""
    _check_weight(weight)
    _check_input(x, weight.k, t_max, "x")
    _check_activation(residual, weight.n, t_max, "residual")
    if len(weight.shards) != 1 or next_weight.dtype != "f32" or next_weight.numel != weight.n:
        raise ValueError(f"{weight.name}: a residual output needs a weight of one shard and a next norm of "
                         f"{weight.n} f32 values, not {next_weight}")
    plan = _plan(builder, weight, t_max, LinearKernel.MATVEC, subgroups, whole_rows)
    shard = plan_shard(weight, plan, _input_kind(builder, x)[0], weight.k, t_max, n_rows=weight.n, row_start=0,
                       y_stride=weight.n, glu=False, q8_output=False, traits=device_traits(builder.device),
                       tuning=_tuning(builder), residual_output=True)
    normed = builder.activation(name, (t_max, weight.n))
    sums = builder.activation(f"{name}.square_sums", (t_max, shard.groups))
    _dispatch(builder, plan, weight, weight.shards[0].tensor, x, residual, t_max, first_row=0, n_rows=weight.n,
              row_start=0, y_stride=weight.n, residual_output=[next_weight, normed, sums])
    return PrenormedInput(normed, sums, shard.groups, eps)


def linear_glu(
    builder: ProgramBuilder, weight: QuantWeight, x: LinearSource,
    y: Tensor | QuantisedActivation, t_max: int, *,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    int8: bool | None = None, activation: str = "gelu_tanh",
) -> None:
    """y = activation(x Wg^T) * (x Wu^T) for the step's first min(n_tokens, t_max) tokens: x [t_max, K]
    -> y [t_max, F], the gated feed-forward before its down projection (GeGLU with gelu_tanh, SwiGLU with silu).

    weight: 2F rows, the gate projection's F rows then the up projection's F (the two GGUF tensors'
    bytes concatenated: same type, rows contiguous). One dispatch computing both and combining them
    in its epilogue, as gpu/kernels/glu_mul.wgsl would; a weight split over several shards (the
    binding limit) falls back to two linears into activations and a glu_mul dispatch. kernel,
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
        source: LinearSource | Int8Input = x
        if isinstance(x, Tensor) and uses_int8_tiles(weight, plan, t_max, f, True, _tuning(builder)):
            source = quantize_input(builder, x, t_max)
        _dispatch(builder, plan, weight, weight.shards[0].tensor, source, y, t_max, first_row=0, n_rows=f,
                  row_start=0, y_stride=f, glu=True, activation=activation)
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
    glu_mul(builder, gate, up, y, activation)


def stacks_in_one_matvec(builder: ProgramBuilder, first: QuantWeight, second: QuantWeight, t_max: int,
                         subgroups: bool | None = None, whole_rows: bool | None = None) -> bool:
    """Whether linear_stacked computes these two matrices of one input in one dispatch
    (kernels/matvec_q4_k_q6_k.wgsl): a Q4_K matrix and a Q6_K one of one shard each and the same rows' width,
    decode matvecs on a GPU, with the K-quant kernels of their own. Under int8 matmuls too: the stacked f32
    dispatch beats an int8 q|k matvec and an f32 v."""
    return planning.stacks_in_one_matvec(first, second, t_max, *_context(builder), subgroups, whole_rows)


def linear_stacked(
    builder: ProgramBuilder, first: QuantWeight, second: QuantWeight, x: Tensor | NormedInput | PrenormedInput,
    y: Tensor, t_max: int, *, subgroups: bool | None = None, whole_rows: bool | None = None,
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
    elif isinstance(x, PrenormedInput):
        tensors = weights + [x.x, y, x.square_sums]
        constants |= {"X_SOURCE": "prenormed", "EPS": x.eps, "PARTS": x.parts}
    else:
        assert isinstance(x, Tensor)
        tensors = weights + [x, y]
        constants |= {"X_SOURCE": "direct"}
    constants["Q6_BINDING"] = len(tensors)
    builder.dispatch("matvec_q4_k_q6_k", constants, tensors + [second.shards[0].tensor],
                     workgroup_grid(-(-n_rows // shape.rows)))


def embedding(
    builder: ProgramBuilder, weight: QuantWeight, ids: Tensor, out: Tensor, t_max: int, scale: float = 1.0, *,
    rows: Tensor | None = None, slot_tokens: Tensor | None = None, images: Tensor | None = None,
    image_id: int | None = None,
) -> None:
    """out[t, :] = W[ids[t], :] * scale for the step's first min(n_tokens, t_max) tokens (kernels/get_rows.wgsl).

    ids: u32 [>= t_max]; out: f32 [>= t_max, K]. An id outside [0, N) leaves its row of out as it was.
    rows and slot_tokens (given together): the row table and the per-sequence last sampled tokens;
    a row marked as decoding (rows[t].z == 1) then takes its id from slot_tokens[rows[t].y]. images
    (f32 [>= t_max, K], with rows): a row marked as an image's (rows[t].z == 2) takes images[t], unscaled;
    image_id (with rows, instead of images): such a row looks up W[image_id] instead.
    """
    _check_weight(weight)
    _check_activation(out, weight.k, t_max, "out")
    if ids.dtype != "u32" or ids.numel < t_max:
        raise ValueError(f"ids {ids} must be u32 with at least {t_max} values")
    if (rows is None) != (slot_tokens is None):
        raise ValueError("rows and slot_tokens go together")
    if images is not None and (rows is None or images.dtype != "f32" or images.numel < t_max * weight.k):
        raise ValueError(f"images {images} must be f32 [>= {t_max}, {weight.k}] and come with rows")
    if image_id is not None and (rows is None or images is not None or not 0 <= image_id < 0xFFFFFFFF):
        raise ValueError(f"image_id {image_id} must be a row id, come with rows and stand instead of images")
    for shard in weight.shards:
        constants = {
            "WEIGHT_TYPE": weight.type_name, "K": weight.k, "N_ROWS": shard.n_rows,
            "ROW_START": shard.row_start, "T_MAX": t_max, "SCALE": scale, "TOKEN_SOURCE": rows is not None,
            **({"IMAGE_ID": image_id} if image_id is not None else {}),  # absent: text-only steps' defines stay
        }
        # unused bindings are not read: ids stands in for rows and slot_tokens, the weight (read-only, large
        # enough) for images
        tensors = [builder.step, ids, shard.tensor, out, rows or ids, slot_tokens or ids, images or shard.tensor]
        builder.dispatch("get_rows", constants, tensors, workgroup_grid(t_max))
