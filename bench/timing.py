"""What every benchmark in bench/ shares, so that Hearth and its peer are measured alike.

Each engine gets the same `--warmup` untimed runs and then the same `--reps` timed runs of every measurement; a
measurement is kept as all its samples and reported as median (min-max), and Hearth against its peer as the
ratio of medians. `--json PATH` records every sample with the machine, the date, the tree's commit and the
command line. Benchmarks are not tests: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPS = 5


def add_timing_args(parser: argparse.ArgumentParser, warmup: int, reps: int = DEFAULT_REPS) -> None:
    """The options every benchmark takes: --warmup and --reps (applied to every engine alike) and --json."""
    parser.add_argument("--warmup", type=int, default=warmup,
                        help=f"untimed runs of each measurement before the timed ones, every engine alike ({warmup})")
    parser.add_argument("--reps", type=int, default=reps,
                        help=f"timed runs of each measurement, every engine alike; median, min and max are reported "
                        f"({reps})")
    parser.add_argument("--json", metavar="PATH",
                        help="write every sample and the run's provenance here ('-' for stdout), e.g. "
                        "bench/results/<machine>-<benchmark>.json")


def check_timing_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject counts that leave nothing to report."""
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")


def timed(run: Callable[[], float], warmup: int, reps: int) -> list[float]:
    """`warmup` untimed calls of run, then `reps` timed ones; returns what the timed calls returned."""
    for _ in range(warmup):
        run()
    return [run() for _ in range(reps)]


def summary(samples: Sequence[float]) -> dict[str, Any]:
    """A measurement as JSON keeps it: every sample, their median, min and max."""
    return {"samples": list(samples), "median": statistics.median(samples), "min": min(samples),
            "max": max(samples)}


def cell(samples: Sequence[float] | None, digits: int | None = None, scale: float = 1.0) -> str:
    """`median (min-max)` of the samples times scale, or "-" when the engine has no such measurement; digits after
    the point: as given, else one, or as many as the median needs to show three significant ones (a CPU's few
    tokens a second)."""
    if not samples:
        return "-"
    lo, mid, hi = (scale * v for v in (min(samples), statistics.median(samples), max(samples)))
    if digits is None:
        digits = 1 if mid == 0 or abs(mid) >= 100 else min(6, 2 - math.floor(math.log10(abs(mid))))
    return f"{mid:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def ratio(numerator: Sequence[float] | None, denominator: Sequence[float] | None) -> float | None:
    """The ratio of the two sample sets' medians, or None where either is missing."""
    if not numerator or not denominator:
        return None
    return statistics.median(numerator) / statistics.median(denominator)


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (what bench/README.md and the top-level README paste)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def run_info(benchmark: str, warmup: int, reps: int) -> dict[str, Any]:
    """Where, when, from which tree and by which command a benchmark ran."""
    # A tree copied to another machine says its commit through HEARTH_COMMIT: the .git that travels with it may
    # be missing or name another commit than the files measured.
    commit = os.environ.get("HEARTH_COMMIT") or _git("rev-parse", "HEAD")
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "arch": platform.machine(), "cpu": _cpu_name(),
                    "cores": os.cpu_count(), "gpus": _gpu_names(), "python": platform.python_version()},
        "commit": commit or None,
        "tree_modified": None if os.environ.get("HEARTH_COMMIT") or not _git("rev-parse", "HEAD")
        else bool(_git("status", "--porcelain", "--untracked-files=no")),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "warmup": warmup, "reps": reps,
    }


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    """Write payload as JSON to path ('-': stdout); nothing when path is None."""
    if path is None:
        return
    text = json.dumps(payload, indent=1)
    if str(path) == "-":
        print(text)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
