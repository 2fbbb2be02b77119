r"""Cross-checks the family fixtures (tests/golden/families) against llama.cpp itself, built from the same vendored
tree as the converter. Dev-time only; it tells whether the golden data and llama.cpp agree on each file:

- logits: llama.cpp on the GGUF, the prompt and the golden greedy tokens in one batch, against the golden rows
  (F32 files agree to ~1e-5; quantised ones do not, as llama.cpp's CPU matmuls quantise activations to Q8 too);
- dequantised: a quantised file rewritten with every tensor dequantised to F32 (same metadata), which must agree
  to ~1e-5: the golden's weights are the file's;
- tokens: llama.cpp's tokenisation of each recorded chat rendering against the HF tokenizer's ids;
- embeddings (qwen3_embedding): llama.cpp's pooled embedding, normalised, against the golden.

Build llama.cpp's libraries and the helper (about 40 minutes on 2 cores; llama-quantize comes with them):

    LCP=/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp
    cmake -S $LCP -B /tmp/lcp-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF
    ninja -C /tmp/lcp-build -j2 llama-quantize
    g++ -O1 -std=c++17 scripts/family_fixtures/lcheck.cpp -I$LCP/include -I$LCP/ggml/include \
        /tmp/lcp-build/src/libllama.a /tmp/lcp-build/ggml/src/libggml.a /tmp/lcp-build/ggml/src/libggml-cpu.a \
        /tmp/lcp-build/ggml/src/libggml-base.a -lpthread -ldl -lm -o /tmp/lcheck
    /work/main/.venv/bin/python scripts/check_family_fixtures.py --lcheck /tmp/lcheck   # ~1 min
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "families"


def lcheck(exe: Path, mode: str, model: Path, stdin: str) -> bytes:
    done = subprocess.run([str(exe), mode, str(model)], input=stdin.encode(), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"lcheck {mode} {model.name}: {done.stderr.decode()}")
    return done.stdout


def dequantised_copy(src: Path, dst: Path) -> Path:
    """src with every tensor dequantised to F32 and the same metadata."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        writer.add_key_value(key, f.contents(), vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY
                             else None)
    for t in reader.tensors:
        shape = [int(n) for n in reversed(t.shape)]
        writer.add_tensor(t.name, np.ascontiguousarray(dequantize(t.data, t.tensor_type).reshape(shape), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def logits_check(exe: Path, model: Path, z: np.lib.npyio.NpzFile, dtype: str, prefix: str = "") -> str:
    """Worst |llama.cpp - golden| / max |golden| over both prompts' rows, and whether every argmax agrees."""
    worst, agree = 0.0, True
    for i in range(2):
        prompt, greedy = z[f"{dtype}/prompt_{i}"].tolist(), z[f"{dtype}/{prefix}greedy_{i}"].tolist()
        gold = z[f"{dtype}/{prefix}logits_{i}"]
        seq = prompt + greedy
        out = np.frombuffer(lcheck(exe, "logits", model, " ".join(map(str, seq))), np.float32)
        rows = out.reshape(len(seq), -1)[len(prompt) - 1:len(prompt) - 1 + len(gold)]
        worst = max(worst, float(np.abs(rows - gold).max() / np.abs(gold).max()))
        agree &= bool((rows.argmax(1)[:len(greedy)] == np.array(greedy)).all())
    return f"rel err {worst:.1e}, argmax {'agrees' if agree else 'DIFFERS'}"


def embedding_check(exe: Path, model: Path, z: np.lib.npyio.NpzFile, dtype: str) -> str:
    worst = 0.0
    for i in range(len(z["texts"])):
        e = np.frombuffer(lcheck(exe, "embed", model, " ".join(map(str, z[f"{dtype}/ids_{i}"].tolist()))), np.float32)
        worst = max(worst, float(np.abs(e / np.linalg.norm(e) - z[f"{dtype}/embedding_{i}"]).max()))
    return f"embedding max abs err {worst:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lcheck", type=Path, required=True, help="the built scripts/family_fixtures/lcheck.cpp")
    parser.add_argument("--golden", type=Path, default=GOLDEN)
    args = parser.parse_args()
    meta = json.loads((args.golden / "meta.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in meta["families"].items():
            z = np.load(args.golden / f"{name}.npz")
            for dtype in entry["dtypes"]:
                path = args.golden / f"{name}.{dtype}.gguf"
                files = {"file": path}
                if dtype != "f32":
                    files["dequantised"] = dequantised_copy(path, Path(tmp) / f"{name}.{dtype}.f32.gguf")
                for label, model in files.items():
                    if "texts" in z:
                        print(f"{name} {dtype} {label}: {embedding_check(args.lcheck, model, z, dtype)}")
                        continue
                    # "" for the golden, then any alternative reading (gemma2's headdim_scale/)
                    prefixes = [""] + sorted({k.split("/")[1] + "/" for k in z.files
                                              if k.startswith(f"{dtype}/") and k.count("/") == 2})
                    for prefix in prefixes:
                        result = logits_check(args.lcheck, model, z, dtype, prefix)
                        print(f"{name} {dtype} {label}{' ' + prefix.rstrip('/') if prefix else ''}: {result}")
            for key in sorted(k for k in z.files if k.startswith("chat/") and k.endswith("/text")):
                model = args.golden / f"{name}.{entry['dtypes'][0]}.gguf"
                ids = [int(t) for t in lcheck(args.lcheck, "tokenize", model, str(z[key])).split()]
                ref = z[key.removesuffix("/text") + "/ids"].tolist()
                same = "match" if ids == ref else f"DIFFER ({len(ids)} vs {len(ref)} ids)"
                print(f"{name} {key.removesuffix('/text')}: llama.cpp and HF tokens {same}")


if __name__ == "__main__":
    main()
