"""Programs: a model's step recorded once as a list of dispatches, replayed by the executor.

    builder = ProgramBuilder(executor, "decode")
    h = builder.activation("h", (T, D))
    builder.dispatch("rms_norm", {"D": D}, [builder.step, x, w, h], workgroups=(T, 1, 1))
    program = builder.build()          # places activations, builds every bind group once
    executor.run(program, StepParams(n_tokens=1), read=[logits])

Every architecture (causal decoder, encoder, encoder-decoder, convolutional vocoder) is a
program of kernels over tensors; adding one adds kernels and a model file, not an executor.
Activations are placed by liveness: two activations share a buffer when no dispatch lies
between the first use of one and the last use of the other.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import wgpu

from gpu.device import STORAGE_USAGE, Device, native_api
from gpu.errors import gpu_stage
from gpu.ops.matmul_tuning import DEFAULT_TUNING, MatmulTuning
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

    n_tokens: int  # token rows processed in this step
    n_out: int = 1  # rows that reach the output head (one per sequence in the step)
    iteration: int = 0  # index of the step among the decode steps of one submission
    seed: int = 0  # sampling counter, different for every step

    STRUCT_BYTES = 16

    def pack(self) -> bytes:
        return struct.pack("<4I", self.n_tokens, self.n_out, self.iteration, self.seed & 0xFFFFFFFF)


@dataclass
class Dispatch:
    kernel: str
    pipeline: Any
    tensors: list[Tensor]
    workgroups: tuple[int, int, int]
    label: str  # the kernel and its variant, for profiles
    defines: dict[str, Any]  # the constants the kernel was specialised by, for tests and tools that inspect a step
    bind_group: Any = None


class Program:
    """A recorded step: dispatches whose bind groups are built, ready to replay."""

    def __init__(self, name: str, dispatches: list[Dispatch], activation_bytes: int) -> None:
        self.name = name
        self.dispatches = dispatches
        self.activation_bytes = activation_bytes
        self._native: list[tuple[Any, Any, int, int, int]] | None = None
        self._checked = 0  # dispatches [0, _checked) have been recorded through wgpu-py once

    def encode(self, compute_pass: Any, start: int = 0, stop: int | None = None) -> None:
        """Record dispatches [start, stop) (all by default) into an open compute pass (the hot loop of a step).

        On wgpu-native, once every dispatch has been recorded through wgpu-py, replays its C functions directly
        with handles gathered once: wgpu-py's methods check and convert their arguments and capture errors on
        every call, which cost 2.9 us per dispatch against 0.8 us direct (measured on the CI machine's CPU, 179
        dispatches of a Gemma 3 270M decode step). The first replays go through wgpu-py, so a dispatch that
        fails validation raises there, with its call; the same commands cannot fail later. This program keeps
        the objects behind the handles alive.
        """
        stop = len(self.dispatches) if stop is None else stop
        api = native_api()
        if api is None or self._native is None:
            self._encode_portable(compute_pass, start, stop)
            if start <= self._checked:
                self._checked = max(self._checked, stop)
            if api is not None and self._checked == len(self.dispatches):
                self._native = [(d.pipeline._internal, d.bind_group._internal, *d.workgroups)
                                for d in self.dispatches]
            return
        lib, null = api.lib, api.ffi.NULL
        set_pipeline, set_bind_group = lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup
        dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        handle = compute_pass._internal
        last_pipeline = None
        for pipeline, bind_group, x, y, z in self._native[start:stop]:
            if pipeline is not last_pipeline:
                set_pipeline(handle, pipeline)
                last_pipeline = pipeline
            set_bind_group(handle, 0, bind_group, 0, null)
            dispatch(handle, x, y, z)

    def _encode_portable(self, compute_pass: Any, start: int, stop: int) -> None:
        last_pipeline = None
        for d in self.dispatches[start:stop]:
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
        # activations also bind as uniforms on a software adapter, where lavapipe reads those faster (whole-row
        # matvecs read x there: gpu/ops/matmul.py)
        self.uniform_activations = self.device.is_software

    def activation(self, name: str, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        tensor = Tensor(f"{self.name}.{name}", tuple(int(s) for s in shape), dtype, Lifetime.ACTIVATION)
        self._activations.append(tensor)
        return tensor

    def discard(self, tensor: Tensor) -> None:
        """Forget an activation that no dispatch binds after all (build() rejects unused ones)."""
        if any(tensor is t for d in self._dispatches for t in d.tensors):
            raise ValueError(f"{tensor.name} is bound by a dispatch")
        self._activations = [t for t in self._activations if t is not tensor]

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
        self._dispatches.append(Dispatch(kernel, pipeline, list(tensors), groups, label, dict(constants)))

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
                usage = STORAGE_USAGE | (wgpu.BufferUsage.UNIFORM if self.uniform_activations else 0)
                buffer = self.device.create_buffer(size, f"{self.name}.pool{len(live) + len(free)}", usage)
                total += size
            tensor.buffer, tensor.offset = buffer, 0
            live.append((last[id(tensor)], size, buffer))
        return total


class Executor:
    """Runs programs: one compute pass and one submit per step, per-step values in one
    16-byte uniform buffer, and only the tensors asked for copied back."""

    def __init__(self, device: Device, *, int8_matmuls: bool = False, tuning: MatmulTuning = DEFAULT_TUNING) -> None:
        self.device = device
        # Programs built for this executor run their GPU matmuls (steps of more than 32 tokens; on a software adapter,
        # the Q8_0 decode matvecs) on activations quantised to 8 bits where the weight type allows
        # (gpu/ops/matmul.py): faster prompts, llama.cpp's numerics.
        self.int8_matmuls = int8_matmuls
        # The matrix kernels' tunable constants that programs built for this executor plan with.
        self.tuning = tuning
        buffer = device.create_buffer(
            StepParams.STRUCT_BYTES, "step", wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
        )
        self.step_tensor = Tensor("step", (StepParams.STRUCT_BYTES // 4,), "u32", Lifetime.PERSISTENT, buffer)
        self._staging: dict[int, list[Any]] = {}  # free MAP_READ buffers by size
        self._rings: dict[int, list[Any]] = {}  # free step-struct rings by size
        self._pool_lock = threading.Lock()
        self.transfer_buffers = 0  # read-back and ring buffers made so far (they are reused once returned)

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
        submission = self.submission()
        submission.step(program, step)
        for t in read:
            submission.read(t)
        return submission.submit().wait()

    def submission(self) -> Submission:
        """An empty batch of commands: steps, copies and reads, submitted together."""
        return Submission(self)

    def dispatch_pipelines(self, programs: Iterable[Program]) -> int:
        """Dispatch each pipeline of these programs once with no workgroups (skipping those this dispatched before),
        in one submission, and wait for it; the pipelines dispatched. A driver that turns a pipeline into machine
        code at its first dispatch rather than at its creation (lavapipe compiles it with LLVM then, seconds a
        kernel on a CPU) does so now rather than in the first request that needs it; nothing runs."""
        device = self.device
        firsts: dict[int, Dispatch] = {}
        for program in programs:
            for d in program.dispatches:
                if id(d.pipeline) not in device.pipelines_dispatched:
                    firsts.setdefault(id(d.pipeline), d)
        if not firsts:
            return 0
        encoder = device.device.create_command_encoder()
        compute_pass = encoder.begin_compute_pass()
        for d in firsts.values():
            compute_pass.set_pipeline(d.pipeline)
            compute_pass.set_bind_group(0, d.bind_group)
            compute_pass.dispatch_workgroups(0, 0, 0)
        compute_pass.end()
        with gpu_stage("compiling pipelines", f"{len(firsts)} at their first dispatch"):
            device.wait_for(device.submit(encoder.finish()))
        device.pipelines_dispatched.update(firsts)
        return len(firsts)

    def read(self, tensor: Tensor) -> np.ndarray:
        """Copy one tensor back outside a step (tests, tools)."""
        raw = self.device.read(tensor.buffer, tensor.nbytes, tensor.name, tensor.offset)
        return np.frombuffer(raw, dtype=NUMPY_DTYPES[tensor.dtype], count=tensor.numel).reshape(tensor.shape).copy()

    def _take_buffer(self, pool: dict[int, list[Any]], nbytes: int, usage: int, label: str) -> Any:
        size = 1 << max(8, (nbytes - 1).bit_length())
        with self._pool_lock:  # submissions may be recorded on another thread (models/text/batch.py)
            free = pool.setdefault(size, [])
            if free:
                return free.pop()
            self.transfer_buffers += 1
        return self.device.create_buffer(size, f"{label}{size}", usage)

    def _give_buffer(self, pool: dict[int, list[Any]], buffer: Any) -> None:
        with self._pool_lock:
            pool.setdefault(buffer.size, []).append(buffer)


class Submission:
    """Several steps (and the copies between them) in one command buffer and one submit.

        submission = executor.submission()
        for i in range(8):                       # eight decode steps, tokens staying on the GPU
            submission.step(program, StepParams(n_tokens=4, iteration=i, seed=s + i))
            submission.copy(sampled, history, dst_offset=16 * i)
        pending = submission.submit()            # returns at once; encode the next while it runs
        tokens, = pending.wait()

    Each step's 16-byte Step struct goes into a ring written once at submit and copied into the
    step uniform before the step's compute pass, so the steps of one submission can differ.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.device = executor.device
        self.encoder = self.device.device.create_command_encoder()
        self._params: list[bytes] = []
        self._ring: Any = None
        self._reads: list[tuple[Tensor, int, int, int]] = []  # (tensor, byte offset, bytes, staging offset)
        self._read_bytes = 0
        self._names: list[str] = []
        self._staging: Any = None  # the buffer the reads come back through, once finish() has taken it
        self._commands: Any = None  # the command buffer, once finish() has ended the recording

    def step(self, program: Program, params: StepParams, early_dispatches: int = 0) -> None:
        """Record one replay of program with these step values.

        early_dispatches > 0: submit the commands recorded so far after each early_dispatches of the program's
        dispatches (its last part waits for submit()), so that the GPU starts on a long step while the host still
        records the rest of it. Recording and submitting a step costs the host a few microseconds a dispatch,
        during which a lone prompt's GPU would otherwise wait (H100: 1.3 to 1.8 ms for the 222 dispatches of a
        Gemma 3 270M prefill, against 8.7 ms of GPU work)."""
        index = len(self._params)
        if self._ring is None:
            self._ring = self.executor._take_buffer(self.executor._rings, 64 * StepParams.STRUCT_BYTES,
                                                    STORAGE_USAGE, "step_ring")
        if (index + 1) * StepParams.STRUCT_BYTES > self._ring.size:
            raise ValueError(f"a submission holds at most {self._ring.size // StepParams.STRUCT_BYTES} steps")
        self._params.append(params.pack())
        self._names.append(program.name)
        self.encoder.copy_buffer_to_buffer(self._ring, index * StepParams.STRUCT_BYTES,
                                           self.executor.step_tensor.buffer, 0, StepParams.STRUCT_BYTES)
        n = len(program.dispatches)
        part = early_dispatches if early_dispatches > 0 else n
        for start in range(0, n, part):
            if start > 0:
                self._submit_early(program.name)
            compute_pass = self.encoder.begin_compute_pass()
            program.encode(compute_pass, start, min(start + part, n))
            compute_pass.end()

    def _submit_early(self, name: str) -> None:
        """Submit the commands recorded so far (with the step values so far) and go on in a new command buffer:
        the queue runs them in order, so the rest still follows them."""
        with gpu_stage("running step", name):
            self.device.queue.write_buffer(self._ring, 0, b"".join(self._params))
            self.device.submit(self.encoder.finish())
        self.encoder = self.device.device.create_command_encoder()

    def copy(self, src: Tensor, dst: Tensor, nbytes: int | None = None, src_offset: int = 0,
             dst_offset: int = 0) -> None:
        """Copy bytes between tensors after the steps recorded so far (offsets in bytes)."""
        nbytes = min(src.nbytes - src_offset, dst.nbytes - dst_offset) if nbytes is None else nbytes
        self.encoder.copy_buffer_to_buffer(src.buffer, src.offset + src_offset, dst.buffer,
                                           dst.offset + dst_offset, nbytes)

    def read(self, tensor: Tensor, nbytes: int | None = None, offset: int = 0) -> None:
        """Copy (part of) a tensor back once everything recorded before this call has run."""
        nbytes = tensor.nbytes - offset if nbytes is None else nbytes
        self._reads.append((tensor, offset, nbytes, self._read_bytes))
        self._read_bytes += (nbytes + 3) & ~3

    def discard(self) -> None:
        """Drop the recorded commands unsent (their step ring and staging buffer go back to the executor)."""
        if self._ring is not None:
            self.executor._give_buffer(self.executor._rings, self._ring)
            self._ring = None
        if self._staging is not None:
            self.executor._give_buffer(self.executor._staging, self._staging)
            self._staging = None
        self._params.clear()

    def finish(self) -> None:
        """End the recording (the reads' copies appended), so that submit() only sends it: a submission recorded
        ahead of the moment it can go (a split decode step's halves) leaves that moment the queue's part alone.
        Nothing may be recorded into it after this."""
        if self._commands is not None:
            return
        executor = self.executor
        if self._reads:
            self._staging = executor._take_buffer(executor._staging, self._read_bytes,
                                                  wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST, "staging")
            for tensor, offset, nbytes, at in self._reads:
                self.encoder.copy_buffer_to_buffer(tensor.buffer, tensor.offset + offset, self._staging, at,
                                                   (nbytes + 3) & ~3)
        with gpu_stage("recording step", ", ".join(dict.fromkeys(self._names)) or "copies"):
            self._commands = self.encoder.finish()

    def submit(self) -> PendingResult:
        """Submit the commands; the result's wait() maps the reads back."""
        self.finish()
        executor, staging, self._staging = self.executor, self._staging, None
        with gpu_stage("running step", ", ".join(dict.fromkeys(self._names)) or "copies"):
            if self._params:
                self.device.queue.write_buffer(self._ring, 0, b"".join(self._params))
            index = self.device.submit(self._commands)
        if self._ring is not None:
            # Reusable at once: a later write to it is a queue operation, ordered after this submission.
            executor._give_buffer(executor._rings, self._ring)
        return PendingResult(self.executor, staging, self._reads, self._read_bytes, self._names, index)


class PendingResult:
    """A submitted batch of commands; wait() returns its reads (and recycles the buffer they came
    back through; a result with reads that is never waited for keeps that buffer)."""

    def __init__(self, executor: Executor, staging: Any, reads: list[tuple[Tensor, int, int, int]],
                 read_bytes: int, names: list[str], index: int | None) -> None:
        self.executor, self.staging, self.reads, self.read_bytes = executor, staging, reads, read_bytes
        self.names, self.index = names, index

    def wait(self) -> list[np.ndarray]:
        """Block until the submission has run; each read as a flat numpy array of its tensor's dtype
        (the whole tensor in its shape when the read took all of it)."""
        executor, out = self.executor, []
        try:
            if self.staging is not None:
                with gpu_stage("running step", ", ".join(dict.fromkeys(self.names))):
                    # this submission only, not the one queued after it
                    raw = executor.device.read_staging(self.staging, self.read_bytes, self.index)
                for tensor, offset, nbytes, at in self.reads:
                    dtype = np.dtype(NUMPY_DTYPES[tensor.dtype])
                    array = np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize, offset=at).copy()
                    out.append(array.reshape(tensor.shape) if offset == 0 and nbytes == tensor.nbytes
                               and array.size == tensor.numel else array)
        finally:
            if self.staging is not None:
                executor._give_buffer(executor._staging, self.staging)
                self.staging = None
        return out
