"""llama.cpp's vocabulary-only GGUFs and their test vectors, read out of the llama-cpp-python sdist.

llama.cpp keeps `models/ggml-vocab-<name>.gguf` (the real vocabulary of a model family, no weights) with
`.inp`/`.out` beside it: test strings and the ids llama.cpp's tokenizer gives them (tests/test-tokenizer-0.cpp).
They are several MB each, so they are not in this repository; the llama-cpp-python sdist on PyPI vendors
llama.cpp with them. The first call downloads that sdist with pip (76 MB; pip also installs the sdist's build
backend to read its metadata: 10 s to a minute), checks its sha256, copies the files asked for out of the tarball
(about 55 MB) and deletes the tarball; later calls find them in the cache, $HEARTH_CACHE_DIR/llama-cpp-vocab/<version>
(default ~/.cache/hearth). An sdist already on disk can be named with $HEARTH_LLAMA_CPP_SDIST instead. Without a
package index (offline) the tests that need the files are skipped, the reason naming pip's error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The release whose llama.cpp made tests/golden/tokenizer_gemma3_270m.json.
VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODELS = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/models/"
SEPARATOR = "\n__ggml_vocab_test__\n"  # between the strings of a .inp file


class VocabUnavailable(RuntimeError):
    """The sdist could not be had (no network, pip failed); the message says why."""


def cache_dir() -> Path:
    """Where the extracted files are kept."""
    root = Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache" / "hearth"))
    return root / "llama-cpp-vocab" / VERSION


def _files(names: tuple[str, ...]) -> list[str]:
    return [f"ggml-vocab-{name}.gguf{ext}" for name in names for ext in ("", ".inp", ".out")]


def _download(into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={VERSION}", "-d", str(into)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as error:
        raise VocabUnavailable(f"pip download of llama-cpp-python {VERSION} timed out") from error
    path = into / SDIST
    if done.returncode != 0 or not path.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VocabUnavailable(f"pip could not download the llama-cpp-python {VERSION} sdist (offline?): {last}")
    return path


def _check(path: Path) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != SDIST_SHA256:
        # Not a skip: a different file under the pinned name would make the expected ids meaningless.
        raise AssertionError(f"{path} has sha256 {digest.hexdigest()}, expected {SDIST_SHA256}")


def _extract(sdist: Path, names: list[str], into: Path) -> None:
    wanted = {MODELS + name: name for name in names}
    with tarfile.open(sdist, "r|gz") as tar:  # streamed: one pass, nothing else unpacked
        for member in tar:
            name = wanted.pop(member.name, None)
            if name is None or not member.isfile():
                continue
            source = tar.extractfile(member)
            assert source is not None
            part = into / (name + ".part")
            with part.open("wb") as out:
                shutil.copyfileobj(source, out)
            part.replace(into / name)  # whole files only, should a run be cut short
            if not wanted:
                break
    if wanted:
        raise AssertionError(f"{sdist} lacks {sorted(wanted)}")


def vocab_dir(names: tuple[str, ...]) -> Path:
    """The folder holding ggml-vocab-<name>.gguf, .inp and .out for each of `names`, fetched once."""
    folder = cache_dir()
    missing = [f for f in _files(names) if not (folder / f).exists()]
    if not missing:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    given = os.environ.get("HEARTH_LLAMA_CPP_SDIST")
    if given:
        _check(Path(given))
        _extract(Path(given), missing, folder)
        return folder
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        sdist = _download(Path(tmp))
        _check(sdist)
        _extract(sdist, missing, folder)
    return folder


def read_cases(gguf: Path) -> list[tuple[str, list[int]]]:
    """(text, llama.cpp's ids) of a vocabulary's test vectors, read as test-tokenizer-0.cpp reads them: the .inp
    split at the separator (a trailing one ends the list), one line of ids per string in the .out."""
    raw = Path(f"{gguf}.inp").read_bytes().decode("utf-8")
    texts, pos = [], 0
    while pos < len(raw):
        cut = raw.find(SEPARATOR, pos)
        if cut < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:cut])
        pos = cut + len(SEPARATOR)
    lines = Path(f"{gguf}.out").read_text(encoding="utf-8").splitlines()
    if len(texts) != len(lines):
        raise AssertionError(f"{gguf}: {len(texts)} strings but {len(lines)} lines of ids")
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, lines)]
