"""Planning of the matrix kernels (gpu/ops/matmul_plan.py) without an adapter: the dispatches of a table of
linears against the ones the tree before the planning split recorded, and the rules' own properties."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from gpu.device import streaming_multiprocessors
from gpu.ops.matmul import quantises_ffn_input, quantises_glu_output
from gpu.ops.matmul_plan import (
    MatvecShape,
    int8_tile,
    matmul_tile,
    matvec_shape,
    row_pairs_shape,
    software_matvec_threads,
    wide_matvec_shape,
)
from gpu.ops.matmul_tuning import DEFAULT_TUNING
from tests.gpu import matmul_scenarios

GOLDEN = Path(__file__).parents[1] / "golden" / "matmul_dispatches.json.gz"
MATVEC_MAX_TOKENS = DEFAULT_TUNING.matvec_max_tokens


@pytest.fixture(scope="module")
def recorded() -> dict[str, str]:
    return dict(matmul_scenarios.scenarios(DEFAULT_TUNING))


def test_dispatches_as_before_the_split(recorded: dict[str, str]) -> None:
    """Every scenario of tests/gpu/matmul_scenarios.py (weight types, Gemma 3's shapes, 1 to 2048 tokens, plain,
    normalised and quantised inputs and outputs, int8 or not, on an H200-like GPU, lavapipe and a GPU without
    subgroups) records the kernels, labels, defines, grids and bindings that the tree before the split did."""
    with gzip.open(GOLDEN, "rt") as f:
        want = json.load(f)
    assert recorded.keys() == want.keys()
    differ = [key for key in want if recorded[key] != want[key]]
    shown = "\n".join(f"{key}:\n  before {want[key]}\n  now    {recorded[key]}" for key in differ[:5])
    assert not differ, f"{len(differ)} of {len(want)} scenarios differ, first:\n{shown}"


def test_tuning_reaches_the_plans(recorded: dict[str, str]) -> None:
    """A tuning injected through the executor changes the dispatches it should and no others: without row pairs,
    the H200's one-token Q4_K down projection (10240 x 2560) takes single rows, its q projection is unchanged."""
    unpaired = dict(matmul_scenarios.scenarios(replace(DEFAULT_TUNING, row_pairs=False)))
    down, q = "h200 linear Q4_K 10240x2560 t1", "h200 linear Q4_K 2560x2048 t1"
    assert "PAIRS=1" in recorded[down] and "PAIRS=0" in unpaired[down]
    assert unpaired[q] == recorded[q]


def test_matmul_tile_choice() -> None:
    """matmul_tile gives a tile the kernel takes, whose threads and f16 workgroup memory fit every adapter
    Hearth meets (256 threads, 16 KiB), f32 tiles lavapipe's 32 KiB."""
    for k in (256, 640, 1024, 2048, 2560, 6912, 10240):
        for n in (64, 256, 640, 1024, 2048, 6912, 10240, 262144):
            for t_max in (5, 64, 512, 2048):
                for glu in (False, True):
                    tile = matmul_tile(k, n, t_max, DEFAULT_TUNING, glu)
                    assert tile.problem(k, glu) is None, (k, n, t_max, glu, tile)
                    assert tile.threads <= 256 and tile.storage_bytes(True) <= 16384
                    assert tile.storage_bytes(False) <= 32768
                    # on an H100 (132 SMs): a split the kernel takes, never more parts than without the SM count
                    on_h100 = matmul_tile(k, n, t_max, DEFAULT_TUNING, glu, sms=132)
                    assert on_h100.problem(k, glu) is None and on_h100.split <= tile.split, (k, n, t_max, glu)
                    assert on_h100._replace(split=tile.split) == tile
                    if t_max < 128:
                        assert on_h100 == tile
                    if glu:  # whole k where the tiles fill two rounds of pairs on every SM, else the same split
                        whole = tile._replace(split=1).groups(n, t_max, True) >= 4 * 132 and t_max >= 128
                        assert on_h100 == (tile._replace(split=1) if whole else tile), (k, n, t_max)


def test_short_glu_steps_split_k() -> None:
    """The GLU's steps of up to glu_part_split_max_tokens tokens (batched decode past the matvecs) split k into
    matmul_part parts as a plain matmul of its rows does; longer ones keep k whole where their tiles are many."""
    most = DEFAULT_TUNING.glu_part_split_max_tokens
    for k, f in ((2560, 10240), (4096, 14336)):
        for t_max in (16, most):
            glu = matmul_tile(k, f, t_max, DEFAULT_TUNING, True, sms=132)
            assert glu.split == matmul_tile(k, 2 * f, t_max, DEFAULT_TUNING, sms=132).split > 1, (k, t_max)
        assert matmul_tile(k, f, 2 * most, DEFAULT_TUNING, True, sms=132).split == 1
    unsplit = replace(DEFAULT_TUNING, glu_part_split_max_tokens=0)
    assert matmul_tile(2560, 10240, most, unsplit, True, sms=132).split == 1


def test_split_in_whole_rounds_on_known_gpus() -> None:
    """The SM counts of NVIDIA adapters by name, and the split they give the 8 x 8 tile: the 1B's down (6912 x
    1152, 36 tiles at 512 tokens) in 7 parts on an H100 or H200, two workgroups on most of their 132 SMs, not the 8
    of matmul_tile's parts of 256 values (288 workgroups: a third round for 24); the 4B's down keeps 8, its o (80
    tiles) takes 3 parts of 42 or 43 chunks."""
    assert streaming_multiprocessors("NVIDIA H100 80GB HBM3") == 132
    assert streaming_multiprocessors("NVIDIA H100 PCIe") == 114
    assert streaming_multiprocessors("NVIDIA H200") == 132
    assert streaming_multiprocessors("NVIDIA A10G") == 80 and streaming_multiprocessors("NVIDIA A100-SXM4-80GB") == 108
    assert streaming_multiprocessors("llvmpipe (LLVM 15.0.7, 256 bits)") is None
    assert streaming_multiprocessors("AMD Radeon RX 7900 XTX") is None
    tuning = DEFAULT_TUNING
    assert matmul_tile(6912, 1152, 512, tuning).split == 8
    assert matmul_tile(6912, 1152, 512, tuning, sms=132).split == 7  # 252 workgroups: two on most SMs
    assert matmul_tile(2048, 2560, 512, tuning, sms=132).split == 3  # the 4B's o: 240, where 8 gave 640
    assert matmul_tile(10240, 2560, 512, tuning, sms=132).split == 8
    assert matmul_tile(1152, 6912, 512, tuning, glu=True, sms=132).split == 2
    assert matmul_tile(2560, 10240, 512, tuning, glu=True).split == 2
    assert matmul_tile(2560, 10240, 512, tuning, glu=True, sms=132).split == 1  # the 4B's GLU: 640 workgroups


def test_matvec_shape_choices() -> None:
    """Every split the heuristics pick is one the kernels take: TPR a power of two, 256 threads at most;
    whole-row workgroups of 8 to 64 threads (a power of two)."""
    for k in (16, 32, 128, 640, 1024, 2048, 4096, 10240):
        for n in (1, 45, 256, 640, 2048, 262144):
            tpr, rows = matvec_shape(k, n, DEFAULT_TUNING)
            assert tpr & (tpr - 1) == 0 and 2 <= tpr <= 64 and 1 <= rows and tpr * rows <= 256, (k, n, tpr, rows)
    for n in (1, 45, 256, 640, 2048, 262144):
        wg = software_matvec_threads(n, DEFAULT_TUNING)
        assert wg & (wg - 1) == 0 and 8 <= wg <= 64, (n, wg)


def test_one_token_gate_up_threads() -> None:
    """A one-token Q4_K gate-up takes one_token_glu_tpr threads a row on the families' widths, Gemma 3 270M's 640 to
    Llama 3.1 8B's 4096 and Gemma 3 27B's 5376 (the 8B's took 16 by the units rule of the other matvecs), more where
    few rows need them for matvec_target_threads threads in all (Qwen3 0.6B's 3072); a different setting reaches
    the plan."""
    widths = ((640, 2048), (1152, 6912), (1536, 12288), (2048, 8192), (2560, 9728), (4096, 14336), (5376, 21504))
    # (at 16 threads a row, 640's 20 units would leave a thread one: its rows keep 8)
    for tpr, shapes in ((DEFAULT_TUNING.one_token_glu_tpr, widths), (16, widths[1:])):
        tuning = replace(DEFAULT_TUNING, one_token_glu_tpr=tpr)
        for k, f in shapes:
            assert wide_matvec_shape(k, f, Q.Q4_K, True, 1, tuning).tpr == tpr, (k, tpr)
    assert wide_matvec_shape(1024, 3072, Q.Q4_K, True, 1, DEFAULT_TUNING).tpr == 16


def test_row_pairs_choice() -> None:
    """row_pairs_shape: one token pairs long rows and output heads at twice the threads a row (up to 64) and half
    the rows a workgroup; steps of several tokens pair every row at 32 threads a row or more, heads as before."""
    shape, tuning = MatvecShape, DEFAULT_TUNING
    head = (2560, 262144)
    assert row_pairs_shape(2560, 2048, 1, shape(32, 4), tuning) is None
    assert row_pairs_shape(10240, 2560, 1, shape(32, 4), tuning) == shape(64, 2)
    assert row_pairs_shape(10240, 2560, 1, shape(64, 4), tuning) is None
    assert row_pairs_shape(*head, 1, shape(4, 64), tuning) == shape(8, 32)
    for t_max in (2, MATVEC_MAX_TOKENS):
        assert row_pairs_shape(2560, 4096, t_max, shape(16, 8), tuning) == shape(32, 4)
        assert row_pairs_shape(2048, 2560, t_max, shape(32, 4), tuning) == shape(32, 2)
        assert row_pairs_shape(10240, 2560, t_max, shape(64, 4), tuning) == shape(64, 2)
        assert row_pairs_shape(1024, 1152, t_max, shape(16, 1), tuning) == shape(32, 1)
        assert row_pairs_shape(*head, t_max, shape(4, 64), tuning) == shape(8, 32)
    off = replace(tuning, row_pairs=False)
    assert row_pairs_shape(2560, 4096, MATVEC_MAX_TOKENS, shape(16, 8), off) is None


def test_int8_tile_choice() -> None:
    """int8_tile gives a tile tiles_i8 takes (a load per weight row and per token fits the workgroup) for the
    shapes of Gemma 3 and 4, and none for steps of up to 32 tokens."""
    tuning = DEFAULT_TUNING
    for k in (640, 1152, 2048, 2560, 6912, 10240):
        for n in (256, 640, 1024, 2048, 6912, 10240):
            for glu in (False, True):
                assert int8_tile(k, n, 32, tuning, glu) is None
                for t_max in (64, 512, 2048):
                    tile = int8_tile(k, n, t_max, tuning, glu)
                    assert tile is not None and k % (32 * tile.split) == 0
                    assert tile.rows % 32 == 0 and tile.rows + tile.tokens <= tile.threads <= 256
                    # k is split only where the tiles alone leave the GPU few workgroups
                    if glu or tile._replace(split=1).groups(n, t_max, glu) >= tuning.int8_few_groups:
                        assert tile.split == 1


@pytest.mark.parametrize("device", ["h200", "plain-gpu"])
def test_int8_decode_feed_forward_choice(device: str) -> None:
    """Which decode feed-forwards keep their activations quantised, as measured (quantises_ffn_input,
    quantises_glu_output): a gate-up on a normalised input in the wide Q4_K kernel whose split is not whole 32-row
    blocks (Gemma 3 4B's, 40 rows a workgroup where the adapter takes workgroups of any size: the H200's subgroup
    reduction) writes f32 for an f32 down; on a plain input (Gemma 4's), or in the generic kernel (the 1B's Q5_0),
    it writes int8 blocks."""
    builder = matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES[device], True, DEFAULT_TUNING)
    weight = matmul_scenarios.weight
    gate_up_4b, down_4b = weight("gu", Q.Q4_K, 2560, 2 * 10240), weight("down", Q.Q4_K, 10240, 2560)
    assert quantises_glu_output(builder, gate_up_4b, down_4b, 1)
    any_size = builder.device.has("subgroup") and builder.device.limits.max_invocations >= 320
    assert any_size == (device == "h200")
    assert quantises_glu_output(builder, gate_up_4b, down_4b, 1, normed_input=True) != any_size
    gate_up_1b, down_1b = weight("gu", Q.Q5_0, 1152, 2 * 6912), weight("down", Q.Q4_K, 6912, 1152)
    assert quantises_glu_output(builder, gate_up_1b, down_1b, 1, normed_input=True)
    assert quantises_ffn_input(builder, gate_up_4b, 1)
    assert not quantises_ffn_input(builder, gate_up_1b, 1)  # no int8 matvec for Q5_0


def test_prenormed_input_choice() -> None:
    """Where a block's output matvec makes the next norm's input (prenorms_inputs, on by default): one-token steps on
    a GPU at widths from prenormed_min_width (Llama 3.2 1B's 2048, Qwen3 4B's 2560, Llama 3.1 8B's 4096; not Qwen3
    0.6B's 1024, whose norms fold into the next matvecs), or narrower ones too wide to fold; f32 programs only; and
    the residual output's plan refuses what its epilogue cannot write, as a quantised output's refuses split
    blocks."""
    from gpu.ops.blocks import Residual
    from gpu.ops.matmul import device_traits, prenorms_inputs
    from gpu.ops.matmul_plan import LinearInput, plan_linear, plan_shard
    from gpu.tensor import Tensor

    tuning = DEFAULT_TUNING
    exact = matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES["h200"], False, tuning)
    int8 = matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES["h200"], True, tuning)
    assert all(prenorms_inputs(exact, width, 1) for width in (2048, 2560, 4096))
    assert not prenorms_inputs(exact, 1024, 1)  # folded into the next matvecs instead
    no_fold = matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES["h200"], False,
                                                replace(tuning, normed_input_max_width=512))
    assert prenorms_inputs(no_fold, 1024, 1)  # too wide to fold
    assert not prenorms_inputs(exact, 4096, 2) and not prenorms_inputs(exact, 4096, MATVEC_MAX_TOKENS + 1)
    assert not prenorms_inputs(int8, 4096, 1)
    assert not prenorms_inputs(matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES["lavapipe"], False,
                                                                 tuning), 4096, 1)
    assert not prenorms_inputs(matmul_scenarios.RecordingBuilder(matmul_scenarios.DEVICES["h200"], False,
                                                                 replace(tuning, prenormed_inputs=False)), 4096, 1)
    # a model whose blocks normalise their outputs (Gemma's post-norms) keeps the fold at any width it fits
    x = Tensor("x", (1, 2560), "f32")
    plain, post_normed = (Residual(exact, x, 1e-6, 1, fusable=True, post_norms=post) for post in (False, True))
    assert plain.prenorm and not plain.fold
    assert post_normed.fold and not post_normed.prenorm
    traits = device_traits(exact.device)
    down = matmul_scenarios.weight("down", Q.Q4_K, 14336, 4096)
    plan = plan_linear(down.name, traits, DEFAULT_TUNING, False, 1)
    shard = {"n_rows": 4096, "row_start": 0, "y_stride": 4096, "glu": False, "q8_output": False, "traits": traits,
             "tuning": DEFAULT_TUNING}
    planned = plan_shard(down, plan, LinearInput.F32, 14336, 1, **shard, residual_output=True)
    assert dict(planned.defines)["STORE"] == "residual"
    with pytest.raises(ValueError, match="all of y's columns"):
        plan_shard(down, plan, LinearInput.F32, 14336, 1, **shard | {"y_stride": 8192}, residual_output=True)
    with pytest.raises(ValueError, match="whole 32-column blocks"):
        plan_shard(down, plan, LinearInput.F32, 14336, 1, **shard | {"n_rows": 4010, "q8_output": True})
