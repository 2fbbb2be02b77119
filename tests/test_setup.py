"""The project skeleton keeps its promises: what `make` runs, what pyproject installs, what the README says."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_readme_starts_with_the_two_commands() -> None:
    lines = [line.split("#")[0].strip() for line in (ROOT / "README.md").read_text().splitlines()]
    assert [line for line in lines if line][:2] == ["make serve", "make test"]


def test_makefile_targets() -> None:
    text = (ROOT / "Makefile").read_text()
    for target in ("setup", "serve", "test", "bench"):
        assert re.search(rf"^{target}:", text, re.M), f"no `{target}` target"
    for target in ("serve", "test", "bench"):  # each installs what it needs first
        assert re.search(rf"^{target}: setup\b", text, re.M), f"`{target}` does not depend on setup"


def test_scripts_are_executable_and_parse() -> None:
    for script in ("scripts/setup.sh", ".ci/run"):
        path = ROOT / script
        assert os.access(path, os.X_OK), f"{script} is not executable"
        subprocess.run(["bash", "-n", str(path)], check=True)


def test_pyproject_packages_and_extras() -> None:
    project = _pyproject()
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in ("server", "gpu", "models", "audio", "config"):
        assert f"{package}*" in include
    extras = project["project"]["optional-dependencies"]
    assert {"test", "models", "bench"} <= set(extras)
    assert any(dep.startswith("pytest") for dep in extras["test"])
    assert any(dep.startswith("llama-cpp-python") for dep in extras["bench"])
    assert any(dep.startswith("ray[serve]") for dep in extras["ray"])  # optional: never in the default install
    assert not any(dep.startswith("ray") for dep in project["project"]["dependencies"])


def test_every_kernel_is_package_data() -> None:
    """A wheel must carry every .wgsl file, includes in subfolders too (setuptools globs like Path.glob)."""
    patterns = _pyproject()["tool"]["setuptools"]["package-data"]["gpu"]
    kernels = set((ROOT / "gpu" / "kernels").rglob("*.wgsl"))
    covered = {path for pattern in patterns for path in (ROOT / "gpu").glob(pattern)}
    assert kernels and kernels <= covered, sorted(str(k) for k in kernels - covered)


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_text", ROOT / "bench" / "text.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bench_prompt_has_exactly_the_asked_length() -> None:
    bench = _load_bench()
    ids = bench.prompt_ids(lambda text: [2] + [len(w) for w in text.split()], 512)  # a stand-in tokenizer
    assert len(ids) == 512 and ids[0] == 2


def test_bench_table_shows_the_ratio() -> None:
    bench = _load_bench()
    results = {
        "hearth": bench.Result("hearth", "", prefill_tok_s=[100.0, 300.0, 200.0], decode_tok_s=[50.0]),
        "llama.cpp": bench.Result("llama.cpp", "", prefill_tok_s=[400.0], decode_tok_s=[25.0]),
    }
    text = bench.table(results, 512, 128)
    prefill, decode = text.splitlines()[1:]
    assert prefill.split()[-1] == "0.50"  # median 200 / 400
    assert decode.split()[-1] == "2.00"
    results["hearth-int8"] = bench.Result("hearth-int8", "", prefill_tok_s=[800.0], decode_tok_s=[10.0])
    header, prefill, decode = bench.table(results, 512, 128).splitlines()
    assert header.split()[-2:] == ["hearth/llama.cpp", "hearth-int8/llama.cpp"]
    assert prefill.split()[-2:] == ["0.50", "2.00"] and decode.split()[-2:] == ["2.00", "0.40"]
