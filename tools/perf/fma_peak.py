"""The GPU's multiply-add peak as a WGSL kernel reaches it: the ceiling the f32 matmul tiles work under.

    python tools/perf/fma_peak.py [--seconds 2] [--json OUT]

Each thread runs CHAINS independent chains of fma(a, m, c) (f32, and vec2<f16> where the adapter has
"shader-f16": NVIDIA's HFMA2, two multiply-adds an instruction) in a loop written out UNROLL times, so that
nearly every instruction issued is a multiply-add and no chain waits on its own latency; 16 workgroups of 256
threads per SM keep every scheduler busy. The rate is that of the dispatches back to back over --seconds
of wall time (after a warm-up, which raises the clocks), as TFLOP/s (2 per multiply-add). On NVIDIA GPUs
nvidia-smi's SM clock and power are sampled meanwhile, if it is there: a card that lowers its clocks under a
dense fma load reaches less than its nominal peak (SMs x 128 lanes x 2 x boost clock).

The source is generated (chains and unrolling as parameters) and stays here, outside gpu/kernels: it is a
probe of the hardware, not one of Hearth's kernels.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu.device import STORAGE_USAGE, default_device

CHAINS = 16  # independent accumulators a thread: 4-cycle fma latency x 4 warps a scheduler is covered
UNROLL = 8  # loop body copies: the counter and branch are 2 of every CHAINS x UNROLL + 2 instructions
THREADS = 256
GROUPS_PER_SM = 16


def fma_source(kind: str, iterations: int) -> str:
    """A kernel of CHAINS chains a thread; kind "f32" or "f16x2"."""
    t = "f32" if kind == "f32" else "vec2<f16>"
    head = "enable f16;\n" if kind == "f16x2" else ""
    seed = "f32(gid.x & 255u) * 1e-6" if kind == "f32" else "vec2<f16>(f16(gid.x & 7u) * 0.01h, 0.02h)"
    lines = [head,
             "@group(0) @binding(0) var<storage, read_write> out: array<f32>;",
             f"@compute @workgroup_size({THREADS})",
             "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {",
             f"    let m = {t}(0.999) + {t}({seed});  // run-time values: nothing folds",
             f"    let c = {t}(0.001) - {t}({seed});"]
    lines += [f"    var a{i} = {t}({seed}) + {t}({i});" for i in range(CHAINS)]
    lines.append(f"    for (var i = 0u; i < {iterations}u; i++) {{")
    for _ in range(UNROLL):
        lines += [f"        a{i} = fma(a{i}, m, c);" for i in range(CHAINS)]
    lines.append("    }")
    total = " + ".join(f"a{i}" for i in range(CHAINS))
    lines.append(f"    let s = {total};")
    lines.append("    out[gid.x] = f32(s.x);" if kind == "f16x2" else "    out[gid.x] = s;")
    lines.append("}")
    return "\n".join(lines)


def sample_clocks() -> subprocess.Popen | None:
    """nvidia-smi printing the SM clock and power every 200 ms until terminated, or None without it."""
    try:
        return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader",
                                 "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None


def measure(kind: str, seconds: float, iterations: int = 2048, groups_per_sm: int = GROUPS_PER_SM) -> dict:
    device = default_device()
    sms = device.sms or 132  # an adapter of unknown SM count: as many workgroups as an H100 takes
    groups = sms * groups_per_sm
    module = device.device.create_shader_module(code=fma_source(kind, iterations), label=f"fma_{kind}")
    pipeline = device.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    out = device.create_buffer(groups * THREADS * 4, "fma out", STORAGE_USAGE)
    bind = device.device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                           entries=[{"binding": 0, "resource": {"buffer": out}}])

    def run(dispatches: int) -> float:
        encoder = device.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind)
        for _ in range(dispatches):
            compute.dispatch_workgroups(groups)
        compute.end()
        start = time.perf_counter()
        device.wait_for(device.submit(encoder.finish()))
        return time.perf_counter() - start

    once = run(1)
    dispatches = max(1, int(0.25 / max(once, 1e-4)))  # passes of about a quarter second
    warm_until = time.perf_counter() + 1.0
    while time.perf_counter() < warm_until:
        run(dispatches)
    clocks = sample_clocks()
    spent, done = 0.0, 0
    while spent < seconds:
        spent += run(dispatches)
        done += dispatches
    samples = []
    if clocks is not None:
        clocks.terminate()
        samples = [line.split(",") for line in clocks.communicate()[0].splitlines() if "," in line]
    lanes = 2 if kind == "f16x2" else 1
    fmas = done * groups * THREADS * iterations * UNROLL * CHAINS * lanes
    result = {"kind": kind, "device": device.name, "tflop_s": 2 * fmas / spent / 1e12, "sms": sms}
    if samples:
        result["sm_clock_mhz"] = sorted(float(s[0].split()[0]) for s in samples)[len(samples) // 2]
        result["power_w"] = sorted(float(s[1].split()[0]) for s in samples)[len(samples) // 2]
        result["nominal_tflop_s_at_that_clock"] = sms * 128 * 2 * lanes * result["sm_clock_mhz"] * 1e6 / 1e12
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--iterations", type=int, default=2048, help="loop trips a thread (of UNROLL x CHAINS)")
    parser.add_argument("--groups-per-sm", type=int, default=GROUPS_PER_SM)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    kinds = ["f32"] + (["f16x2"] if default_device().has("shader-f16") else [])
    rows = []
    for kind in kinds:
        rows.append(measure(kind, args.seconds, args.iterations, args.groups_per_sm))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
