"""The dispatches gpu/ops/matmul.py records for a table of linears, recorded without an adapter.

Each scenario (weight type, K, N, t_max, GLU, input and output kind, int8 matmuls, device) runs the public entry
points (linear, linear_output, linear_glu, linear_stacked, the fusion predicates) on a builder that only records
what it is asked to dispatch: kernel, profile label, defines, grid and bound tensors. tests/gpu/test_matmul_plan.py
compares the records with tests/golden/matmul_dispatches.json.gz, which this module wrote at the tree before
matmul.py was split into planning, tuning and dispatch (commit 1e2d9c3), so every shape in the table keeps its
kernels, defines and grids:

    python -m tests.gpu.matmul_scenarios tests/golden/matmul_dispatches.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from gguf import GGMLQuantizationType as Q

from gpu.ops import matmul
from gpu.tensor import Lifetime, Tensor
from gpu.weights import QuantWeight, WeightShard


@dataclass(frozen=True)
class FakeLimits:
    max_binding_bytes: int
    workgroup_storage_bytes: int
    max_invocations: int


@dataclass(frozen=True)
class FakeDevice:
    """What matmul planning reads from a gpu.device.Device."""

    name: str
    is_software: bool
    features: frozenset[str]
    sms: int | None
    limits: FakeLimits

    def has(self, feature: str) -> bool:
        return feature in self.features


DEVICES = {
    "h200": FakeDevice("NVIDIA H200", False, frozenset({"subgroup", "shader-f16", "timestamp-query"}), 132,
                       FakeLimits(2 << 30, 48 << 10, 1024)),
    "lavapipe": FakeDevice("llvmpipe (LLVM 15.0.6, 256 bits)", True,
                           frozenset({"subgroup", "shader-f16", "timestamp-query"}), None,
                           FakeLimits(128 << 20, 32 << 10, 1024)),
    "plain-gpu": FakeDevice("a GPU without subgroups", False, frozenset(), None, FakeLimits(128 << 20, 32 << 10, 256)),
}


class RecordingBuilder:
    """The parts of gpu.program.ProgramBuilder that matmul uses, recording dispatches as text."""

    def __init__(self, device: FakeDevice, int8_matmuls: bool, tuning: Any) -> None:
        self.device = device
        self.executor = SimpleNamespace(device=device, int8_matmuls=int8_matmuls, tuning=tuning)
        self.name = "p"
        self.step = Tensor("step", (4,), "u32")
        self.uniform_activations = device.is_software  # as ProgramBuilder's
        self.records: list[str] = []

    def activation(self, name: str, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        return Tensor(f"{self.name}.{name}", tuple(int(s) for s in shape), dtype, Lifetime.ACTIVATION)

    def discard(self, tensor: Tensor) -> None:
        pass

    def dispatch(self, kernel: str, constants: dict[str, Any], tensors: Sequence[Tensor],
                 workgroups: Sequence[int]) -> None:
        groups = tuple(int(g) for g in workgroups) + (1,) * (3 - len(workgroups))
        defines = " ".join(f"{key}={constants[key]!r}" for key in sorted(constants))
        names = ",".join(t.name for t in tensors)
        # the profile label of ProgramBuilder.dispatch: the string defines in the order given
        label = ",".join(str(v) for v in constants.values() if isinstance(v, str))
        self.records.append(f"{kernel}[{label}] {defines} @{groups[0]},{groups[1]},{groups[2]} [{names}]")


def weight(name: str, qtype: Q, k: int, n: int, shards: int = 1) -> QuantWeight:
    """A weight of shapes only (no buffers), its rows over `shards` equal shards (the last shorter)."""
    rows = -(-n // shards)
    parts = [WeightShard(Tensor(f"{name}.{i}", (rows,), "u32"), start, min(rows, n - start))
             for i, start in enumerate(range(0, n, rows))]
    return QuantWeight(name, qtype, k, n, parts)


def normed_input(t_max: int, k: int) -> Any:
    tensors = [Tensor(name, shape, "f32") for name, shape in
               (("block_out", (t_max, k)), ("w_post", (k,)), ("residual", (t_max, k)), ("w_next", (k,)),
                ("residual_out", (t_max, k)))]
    return matmul.NormedInput(*tensors, eps=1e-6)


def quantised(name: str, t_max: int, width: int) -> Any:
    return matmul.QuantisedActivation(Tensor(name, (t_max, width * 5 // 16), "u32"), width)


LINEAR_SHAPES = [(640, 1024), (640, 256), (1024, 640), (2048, 640), (1152, 1024), (1152, 256), (1024, 1152),
                 (6912, 1152), (2560, 2048), (2560, 4096), (2560, 1024), (2048, 2560), (10240, 2560), (256, 45),
                 (640, 262144), (1152, 262144), (2560, 262144)]
GLU_SHAPES = [(640, 2048), (1152, 6912), (2560, 10240), (256, 128)]
MAIN_TYPES = [Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0]
OTHER_TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_1, Q.Q5_K]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 512, 2048]
# (device, int8 matmuls): int8 is the executor's choice (on software adapters it reaches the whole-row Q8_0 matvecs)
SETUPS = [("h200", False), ("h200", True), ("lavapipe", False), ("lavapipe", True), ("plain-gpu", False),
          ("plain-gpu", True)]


def _run(builder: RecordingBuilder, call: Callable[[], Any]) -> str:
    try:
        result = call()
    except ValueError:  # the shape or input kind is refused: which message is not part of the table
        builder.records.append("ValueError")
        result = None
    if isinstance(result, bool):
        builder.records.append(f"-> {result}")
    elif result is not None and not isinstance(result, Tensor):
        builder.records.append(f"-> {type(result).__name__}({result.split}, {result.rows}, {result.parts.name})")
    return " | ".join(builder.records)


def scenarios(tuning: Any) -> Iterator[tuple[str, str]]:
    """(key, the dispatches and results as text) of every scenario."""

    def fits(qtype: Q, k: int) -> bool:
        return k % matmul.block_values(qtype) == 0

    for device_name, int8 in SETUPS:
        device = DEVICES[device_name]
        setup = f"{device_name}{'-int8' if int8 else ''}"

        def record(key: str, call: Callable[[RecordingBuilder], Any]) -> tuple[str, str]:
            builder = RecordingBuilder(device, int8, tuning)
            return f"{setup} {key}", _run(builder, lambda: call(builder))

        for t_max in TOKENS:
            for types, shapes in ((MAIN_TYPES, LINEAR_SHAPES), (OTHER_TYPES, LINEAR_SHAPES[:2] + LINEAR_SHAPES[8:9])):
                for qtype in types:
                    for k, n in shapes:
                        if not fits(qtype, k) or (n >= 65536 and t_max > 64):
                            continue
                        w = weight("w", qtype, k, n)
                        x = Tensor("x", (t_max, k), "f32")
                        key = f"{qtype.name} {k}x{n} t{t_max}"
                        yield record(f"linear {key}", lambda b: matmul.linear(b, w, x, b.activation("y", (t_max, n)),
                                                                                t_max))
                        if t_max > 8:
                            yield record(f"linear_output {key}", lambda b: matmul.linear_output(b, w, x, "o", t_max))
                            if qtype in MAIN_TYPES and k % 64 == 0:
                                yield record(f"quantised-input {key}", lambda b: matmul.linear(
                                    b, w, quantised("xq", t_max, k), b.activation("y", (t_max, n)), t_max))
                                yield record(f"quantises_prompt_input {key}",
                                             lambda b: matmul.quantises_prompt_input(b, [w], t_max))
                            continue
                        yield record(f"normed {key}", lambda b: matmul.linear(
                            b, w, normed_input(t_max, k), b.activation("y", (t_max, n)), t_max))
                        if qtype in MAIN_TYPES and k % 64 == 0:
                            yield record(f"quantised-input {key}", lambda b: matmul.linear(
                                b, w, quantised("xq", t_max, k), b.activation("y", (t_max, n)), t_max))
            for qtype in MAIN_TYPES + OTHER_TYPES:
                for k, f in GLU_SHAPES if qtype in MAIN_TYPES else GLU_SHAPES[:1]:
                    if not fits(qtype, k) or (qtype in OTHER_TYPES and t_max not in (1, 8, 64, 512)):
                        continue
                    gate_up = weight("gu", qtype, k, 2 * f)
                    x = Tensor("x", (t_max, k), "f32")
                    key = f"{qtype.name} {k}x2x{f} t{t_max}"
                    yield record(f"glu {key}", lambda b: matmul.linear_glu(b, gate_up, x, b.activation("y", (t_max, f)),
                                                                           t_max))
                    yield record(f"glu-sharded {key}", lambda b: matmul.linear_glu(
                        b, weight("gu", qtype, k, 2 * f, 3), x, b.activation("y", (t_max, f)), t_max))
                    if t_max > 8:
                        if k % 64 == 0:
                            yield record(f"glu-quantised-input {key}", lambda b: matmul.linear_glu(
                                b, gate_up, quantised("xq", t_max, k), b.activation("y", (t_max, f)), t_max))
                        continue
                    yield record(f"glu-normed {key}", lambda b: matmul.linear_glu(
                        b, gate_up, normed_input(t_max, k), b.activation("y", (t_max, f)), t_max))
                    if f % 64 == 0:
                        yield record(f"glu-quantised-output {key}", lambda b: matmul.linear_glu(
                            b, gate_up, x, quantised("yq", t_max, f), t_max))
                        yield record(f"glu-normed-quantised-output {key}", lambda b: matmul.linear_glu(
                            b, gate_up, normed_input(t_max, k), quantised("yq", t_max, f), t_max))
                    if k % 64 == 0:
                        yield record(f"glu-quantised-input {key}", lambda b: matmul.linear_glu(
                            b, gate_up, quantised("xq", t_max, k), b.activation("y", (t_max, f)), t_max))
                    yield record(f"quantises_ffn_input {key}", lambda b: matmul.quantises_ffn_input(b, gate_up, t_max))
                    for down_type in (Q.Q4_K, Q.Q6_K):
                        down = weight("down", down_type, f, k)
                        if not fits(down_type, f):
                            continue
                        for normed in (False, True):
                            yield record(f"quantises_glu_output {key} {down_type.name} normed={normed}",
                                         lambda b: matmul.quantises_glu_output(b, gate_up, down, t_max, normed))
            for k in (16, 256, 640, 1152, 2048, 2560, 4096):
                yield record(f"folds_norms {k} t{t_max}", lambda b: matmul.folds_norms(b, k, t_max))
            if t_max > 8:
                continue
            for k, n_first, n_second in ((2560, 3072, 1024), (1152, 1280, 256), (512, 48, 37), (2560, 2048, 1024)):
                first, second = weight("qk", Q.Q4_K, k, n_first), weight("v", Q.Q6_K, k, n_second)
                key = f"{k}x{n_first}+{n_second} t{t_max}"
                for normed in (False, True):
                    x = normed_input(t_max, k) if normed else Tensor("x", (t_max, k), "f32")
                    yield record(f"stacked normed={normed} {key}", lambda b: matmul.linear_stacked(
                        b, first, second, x, b.activation("y", (t_max, n_first + n_second)), t_max))
                yield record(f"stacks_in_one_matvec {key}",
                             lambda b: matmul.stacks_in_one_matvec(b, first, second, t_max))
            sharded = weight("w", Q.Q8_0, 640, 262144, 3)
            yield record(f"linear-sharded Q8_0 640x262144 t{t_max}", lambda b: matmul.linear(
                b, sharded, Tensor("x", (t_max, 640), "f32"), b.activation("y", (t_max, 262144)), t_max))


def main(argv: list[str]) -> None:
    tuning = None
    try:
        from gpu.ops.matmul_tuning import DEFAULT_TUNING

        tuning = DEFAULT_TUNING
    except ImportError:  # the tree before the tuning object, where the golden file was written
        pass
    table = dict(scenarios(tuning))
    text = json.dumps(table, indent=0, sort_keys=True) + "\n"
    with open(argv[0], "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as out:  # the same bytes each run
        out.write(text.encode())
    print(f"{len(table)} scenarios -> {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
