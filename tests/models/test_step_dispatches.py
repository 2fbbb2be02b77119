"""The step programs of Gemma 3 and Gemma 4 record the same dispatches as the tree before the decoder redesign: the
same kernels, defines and workgroup grids, in the same order, on lavapipe's software paths and with the adapter
described as a GPU (folded norms, stacked matvecs, int8 activations). The golden, tests/golden/step_dispatches.json,
was captured at commit 1e2d9c3 (the tree before it) with scripts/capture_step_dispatches.py; kernels renamed since
are mapped to their new names. Software programs' entries were taken again where their kernels changed since
(whole-row matvecs, attention_key_lanes for attention), their other dispatches checked unchanged; so were the GPU
programs whose matvecs changed plans on purpose since (rows interleaved, every row of x computed), their --lines
differing only in those defines; and the software programs whose whole-row matvecs read x from a uniform binding
(X_SOURCE, X_VEC4 their only new defines), whose attention_key_lanes takes the heads of a kv head together
(HEAD_GROUP its new define, its grid that many times smaller), and whose whole-row matmuls hold a block's shared
loads (HELD_LOADS their only new define) and take 16 rows a thread (their grids halved), and whose attention_combine
and sampling's first pass run smaller workgroups (WG their only new define). Where a digest differs, the script's
--lines output at the base (`git worktree add /tmp/base 1e2d9c3`) and here shows where."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from scripts import capture_step_dispatches as capture

GOLDEN = Path(__file__).parent.parent / "golden" / "step_dispatches.json"
RENAMED = {  # kernel at the base -> its name now
    "moe_route": "expert_route", "moe_matvec": "expert_matvec", "moe_gelu_mul": "expert_gelu_mul",
    "ple_combine": "per_layer_inputs", "ple_gelu_mul": "gelu_mul_slice",
}


@pytest.fixture(scope="module")
def programs() -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory() as folder:
        return capture.capture(capture.write_models(Path(folder)))


def _as_base(entry: str) -> str:
    """A dispatch line with its kernel under the name the base gave it, without LATER_KEYS=False (Gemma 4's larger
    kinds keep an image's rows causal on full layers, a define the base did not have; text rows are causal either
    way, so the programs compute what the base's did)."""
    kernel, rest = entry.split(" ", 1)
    base = {new: old for old, new in RENAMED.items()}
    defines, _, grid = rest.rpartition(" ")
    defines = ",".join(d for d in defines.split(",") if d != "LATER_KEYS=False")
    return f"{base.get(kernel, kernel)} {defines} {grid}"


def test_step_programs_record_the_dispatches_of_the_base(programs: dict[str, list[str]]) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert sorted(programs) == sorted(golden)
    for key, lines in programs.items():
        want, got = golden[key], capture.summary([_as_base(entry) for entry in lines])
        assert got["kernels"] == want["kernels"], f"{key}: the kernels differ"
        assert got["dispatches"] == want["dispatches"], key
        assert got["sha256"] == want["sha256"], f"{key}: defines or grids differ"
