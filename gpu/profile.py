"""Per-kernel GPU time of a program from timestamp queries, and the benchmarks' timed passes (PassTimer).

Each dispatch runs in a compute pass of its own with timestamps at the pass's start and
end, so the figures include no encoding cost but do include a pass boundary per dispatch;
they show where a step's GPU time goes, not the step's wall time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import wgpu

from gpu.errors import gpu_stage
from gpu.program import Executor, Program, StepParams


@dataclass
class KernelTime:
    kernel: str
    calls: int
    total_us: float


def profile_program(executor: Executor, program: Program, step: StepParams, repeats: int = 3) -> list[KernelTime]:
    """GPU time per kernel name (median over repeats), largest first."""
    device = executor.device
    if not device.has("timestamp-query"):
        raise RuntimeError(f"{device.name} has no timestamp-query feature: cannot profile")
    n = len(program.dispatches)
    with gpu_stage("profiling", program.name):
        query_set = device.device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * n)
        resolve = device.create_buffer(16 * n, "profile.resolve",
                                       wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        device.queue.write_buffer(executor.step_tensor.buffer, 0, step.pack())
        runs = []
        for _ in range(repeats):
            encoder = device.device.create_command_encoder()
            for i, d in enumerate(program.dispatches):
                compute_pass = encoder.begin_compute_pass(timestamp_writes={
                    "query_set": query_set, "beginning_of_pass_write_index": 2 * i,
                    "end_of_pass_write_index": 2 * i + 1})
                compute_pass.set_pipeline(d.pipeline)
                compute_pass.set_bind_group(0, d.bind_group)
                compute_pass.dispatch_workgroups(*d.workgroups)
                compute_pass.end()
            encoder.resolve_query_set(query_set, 0, 2 * n, resolve, 0)
            device.queue.submit([encoder.finish()])
            stamps = np.frombuffer(device.queue.read_buffer(resolve, 0, 16 * n), dtype=np.uint64).reshape(n, 2)
            runs.append((stamps[:, 1] - stamps[:, 0]).astype(np.float64) / 1000.0)  # ns -> us
    per_dispatch = np.median(np.stack(runs), axis=0)
    totals: dict[str, list[float]] = defaultdict(list)
    for d, us in zip(program.dispatches, per_dispatch):
        totals[d.label].append(float(us))
    return sorted((KernelTime(k, len(v), sum(v)) for k, v in totals.items()), key=lambda t: -t.total_us)


class PassTimer:
    """Times one compute pass replaying a program: its GPU time from timestamp queries at the pass's start and end
    (the benchmarks' figure: no encoding cost, one pass boundary), and the wall time from submit to completion."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        device = executor.device
        self.timestamps = device.has("timestamp-query")
        if self.timestamps:
            self.query_set = device.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            self.resolve = device.create_buffer(16, "timer.resolve",
                                                wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)

    def time_pass(self, program: Program, reps: int, n_tokens: int) -> tuple[float, float]:
        """(GPU seconds, or nan without timestamp queries; wall seconds) of one pass of reps replays of program."""
        device = self.executor.device
        device.queue.write_buffer(self.executor.step_tensor.buffer, 0, StepParams(n_tokens).pack())
        encoder = device.device.create_command_encoder()
        writes = {"query_set": self.query_set, "beginning_of_pass_write_index": 0,
                  "end_of_pass_write_index": 1} if self.timestamps else None
        compute_pass = encoder.begin_compute_pass(timestamp_writes=writes)
        for _ in range(reps):
            program.encode(compute_pass)
        compute_pass.end()
        if self.timestamps:
            encoder.resolve_query_set(self.query_set, 0, 2, self.resolve, 0)
        start = time.perf_counter()
        device.queue.submit([encoder.finish()])
        if self.timestamps:
            stamps = np.frombuffer(device.queue.read_buffer(self.resolve, 0, 16), np.uint64)
            gpu = float(stamps[1] - stamps[0]) * 1e-9
        else:
            device.queue.read_buffer(self.executor.step_tensor.buffer, 0, 4)  # waits for the submission
            gpu = float("nan")
        return gpu, time.perf_counter() - start


def profile_report(executor: Executor, label: str, program: Program, step: StepParams) -> str:
    """A printable per-kernel profile of one step: a header line, then one line per kernel variant."""
    times = profile_program(executor, program, step)
    total = sum(t.total_us for t in times)
    lines = [f"{label}: {step.n_tokens} token row(s), {len(program.dispatches)} dispatches, "
             f"{total:.0f} us of GPU time ({executor.device.name})"]
    lines += [f"  {t.total_us:10.1f} us {100 * t.total_us / total:5.1f}% {t.calls:5d}x  {t.kernel}" for t in times]
    return "\n".join(lines)
