"""Programs: a model's step recorded once as a list of dispatches, replayed by the executor.

    builder = ProgramBuilder(executor, "decode")
    h = builder.activation("h", (T, D))
    builder.dispatch("rms_norm", {"D": D}, [builder.step, x, w, h], workgroups=(T, 1, 1))
    program = builder.build()          # places activations, builds every bind group once
    executor.run(program, StepParams(n_tokens=1, pos=41), read=[logits])

Every architecture (causal decoder, encoder, encoder-decoder, convolutional vocoder) is a
program of kernels over tensors; adding one adds kernels and a model file, not an executor.
Activations are placed by liveness: two activations share a buffer when no dispatch lies
between the first use of one and the last use of the other.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import wgpu

from gpu.device import Device
from gpu.errors import gpu_stage
from gpu.tensor import NUMPY_DTYPES, Lifetime, Tensor

MAX_GROUPS_PER_DIM = 65535


def workgroup_grid(n_groups: int) -> tuple[int, int, int]:
    """Spread n_groups workgroups over x and y (each at most 65535); kernels linearise
    the id as `wid.x + wid.y * nwg.x` and skip ids past the count they were given."""
    if n_groups <= MAX_GROUPS_PER_DIM:
        return (max(1, n_groups), 1, 1)
    rows = -(-n_groups // MAX_GROUPS_PER_DIM)
    return (-(-n_groups // rows), rows, 1)


@dataclass(frozen=True)
class StepParams:
    """Mirror of `struct Step` in kernels/common/step.wgsl (16 bytes, all u32)."""

    n_tokens: int  # tokens processed in this step (rows of the activations)
    pos: int  # sequence position of the step's first token
    seed: int = 0  # reserved for sampling on the GPU

    STRUCT_BYTES = 16

    def pack(self) -> bytes:
        # kv_len = pos + n_tokens: the keys visible to the step's last token
        return struct.pack("<4I", self.n_tokens, self.pos, self.pos + self.n_tokens, self.seed)


@dataclass
class Dispatch:
    kernel: str
    pipeline: Any
    tensors: list[Tensor]
    workgroups: tuple[int, int, int]
    label: str  # the kernel and its variant, for profiles
    bind_group: Any = None


class Program:
    """A recorded step: dispatches whose bind groups are built, ready to replay."""

    def __init__(self, name: str, dispatches: list[Dispatch], activation_bytes: int) -> None:
        self.name = name
        self.dispatches = dispatches
        self.activation_bytes = activation_bytes

    def encode(self, compute_pass: Any) -> None:
        """Record every dispatch into an open compute pass (the hot loop of a step)."""
        last_pipeline = None
        for d in self.dispatches:
            if d.pipeline is not last_pipeline:
                compute_pass.set_pipeline(d.pipeline)
                last_pipeline = d.pipeline
            compute_pass.set_bind_group(0, d.bind_group)
            compute_pass.dispatch_workgroups(*d.workgroups)


class ProgramBuilder:
    """Collects dispatches and activations, then places activations and binds everything."""

    def __init__(self, executor: Executor, name: str) -> None:
        self.executor = executor
        self.device = executor.device
        self.name = name
        self.step = executor.step_tensor
        self._dispatches: list[Dispatch] = []
        self._activations: list[Tensor] = []

    def activation(self, name: str, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        tensor = Tensor(f"{self.name}.{name}", tuple(int(s) for s in shape), dtype, Lifetime.ACTIVATION)
        self._activations.append(tensor)
        return tensor

    def dispatch(
        self, kernel: str, constants: dict[str, Any], tensors: Sequence[Tensor], workgroups: Sequence[int]
    ) -> None:
        """Add one dispatch; tensors are bound in order to @binding(0), (1), ... of group 0."""
        groups = tuple(int(g) for g in workgroups) + (1,) * (3 - len(workgroups))
        if any(g > MAX_GROUPS_PER_DIM for g in groups):
            raise ValueError(f"{kernel}: {groups} workgroups exceed {MAX_GROUPS_PER_DIM} per dimension")
        pipeline = self.device.pipeline(kernel, constants)
        variant = ",".join(str(v) for v in constants.values() if isinstance(v, str))
        label = f"{kernel}[{variant}]" if variant else kernel
        self._dispatches.append(Dispatch(kernel, pipeline, list(tensors), groups, label))

    def build(self) -> Program:
        total = self._place_activations()
        for d in self._dispatches:
            with gpu_stage("creating bind group", d.kernel):
                layout = d.pipeline.get_bind_group_layout(0)
                entries = [{"binding": i, "resource": t.binding()} for i, t in enumerate(d.tensors)]
                d.bind_group = self.device.device.create_bind_group(layout=layout, entries=entries)
        return Program(self.name, self._dispatches, total)

    def _place_activations(self) -> int:
        """Give each activation a buffer, reusing buffers whose tensors are dead (best fit)."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for index, d in enumerate(self._dispatches):
            for t in d.tensors:
                if t.lifetime is Lifetime.ACTIVATION:
                    first.setdefault(id(t), index)
                    last[id(t)] = index
        unused = [t.name for t in self._activations if id(t) not in first]
        if unused:
            raise ValueError(f"activations never used by a dispatch: {unused}")
        by_start = sorted(self._activations, key=lambda t: first[id(t)])
        free: list[tuple[int, Any]] = []  # (size, buffer) of dead tensors
        live: list[tuple[int, int, Any]] = []  # (last use, size, buffer)
        total = 0
        for tensor in by_start:
            start = first[id(tensor)]
            for entry in [e for e in live if e[0] < start]:
                live.remove(entry)
                free.append((entry[1], entry[2]))
            fitting = [f for f in free if f[0] >= tensor.nbytes]
            if fitting:
                size, buffer = min(fitting, key=lambda f: f[0])
                free.remove((size, buffer))
            else:
                size = tensor.nbytes
                buffer = self.device.create_buffer(size, f"{self.name}.pool{len(live) + len(free)}")
                total += size
            tensor.buffer, tensor.offset = buffer, 0
            live.append((last[id(tensor)], size, buffer))
        return total


class Executor:
    """Runs programs: one compute pass and one submit per step, per-step values in one
    16-byte uniform buffer, and only the tensors asked for copied back."""

    def __init__(self, device: Device) -> None:
        self.device = device
        buffer = device.create_buffer(
            StepParams.STRUCT_BYTES, "step", wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
        )
        self.step_tensor = Tensor("step", (StepParams.STRUCT_BYTES // 4,), "u32", Lifetime.PERSISTENT, buffer)
        self._staging: dict[int, Any] = {}

    def tensor(self, name: str, shape: Sequence[int], dtype: str = "f32", data: np.ndarray | None = None) -> Tensor:
        """A persistent tensor with its own buffer (weights, caches, inputs, outputs)."""
        tensor = Tensor(name, tuple(int(s) for s in shape), dtype)
        tensor.buffer = self.device.create_buffer(tensor.nbytes, name)
        if data is not None:
            self.write(tensor, data)
        return tensor

    def write(self, tensor: Tensor, data: np.ndarray, offset_elements: int = 0) -> None:
        array = np.ascontiguousarray(data, dtype=NUMPY_DTYPES[tensor.dtype])
        itemsize = 2 if tensor.dtype == "packed_f16" else 4
        self.device.write(tensor.buffer, array, tensor.name, tensor.offset + offset_elements * itemsize)

    def run(self, program: Program, step: StepParams, read: Sequence[Tensor] = ()) -> list[np.ndarray]:
        """Replay program once and return the tensors in `read` as numpy arrays."""
        device = self.device
        with gpu_stage("running step", program.name):
            device.queue.write_buffer(self.step_tensor.buffer, 0, step.pack())
            encoder = device.device.create_command_encoder()
            compute_pass = encoder.begin_compute_pass()
            program.encode(compute_pass)
            compute_pass.end()
            staged = []
            offset = 0
            if read:
                staging = self._staging_buffer(sum(t.nbytes for t in read))
                for t in read:
                    encoder.copy_buffer_to_buffer(t.buffer, t.offset, staging, offset, t.nbytes)
                    staged.append((t, offset))
                    offset += t.nbytes
            device.queue.submit([encoder.finish()])
            if not read:
                return []
            staging.map_sync(wgpu.MapMode.READ, 0, offset)
            try:
                raw = staging.read_mapped(0, offset, copy=True)
            finally:
                staging.unmap()
        out = []
        for t, start in staged:
            dtype = NUMPY_DTYPES[t.dtype]
            out.append(np.frombuffer(raw, dtype=dtype, count=t.numel, offset=start).reshape(t.shape).copy())
        return out

    def read(self, tensor: Tensor) -> np.ndarray:
        """Copy one tensor back outside a step (tests, tools)."""
        raw = self.device.read(tensor.buffer, tensor.nbytes, tensor.name, tensor.offset)
        return np.frombuffer(raw, dtype=NUMPY_DTYPES[tensor.dtype], count=tensor.numel).reshape(tensor.shape).copy()

    def _staging_buffer(self, nbytes: int) -> Any:
        size = 1 << max(8, (nbytes - 1).bit_length())
        if size not in self._staging:
            self._staging[size] = self.device.create_buffer(
                size, f"staging{size}", wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            )
        return self._staging[size]
