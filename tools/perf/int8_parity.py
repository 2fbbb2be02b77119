"""The real Gemma 3 270M on a GPU: exact and int8-activation prefill (`int8_activations`) against the
golden logits of transformers and llama.cpp, on the golden prompts long enough to use the int8 matmuls.

Here (where tests/golden holds the goldens and the shipped model is installed):
    python tools/perf/int8_parity.py pack DIR        # DIR/model.gguf and DIR/golden_long.npz (~257 MB)
On the GPU machine, with those two files (split into parts under the transfer limit and joined there,
as bench/audio_gpu.sh does for the audio models):
    python tools/perf/int8_parity.py run DIR/model.gguf DIR/golden_long.npz
Per prompt and mode: cosine and max |diff| of the last position's logits against transformers (float32,
the exact reference) and llama.cpp (CUDA, whose matmuls quantise activations too), the argmax, and where
64 greedy tokens first leave transformers' (with the reference's top-two margin there). A report, not a
test: the exact path is held to its bounds by tests/models/test_gemma3_parity.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"
GREEDY = 64  # tokens generated per prompt and mode
LONG = 32  # prompts longer than this prefill through matmuls (int8 where asked); shorter ones through matvecs


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def pack(out: Path) -> None:
    from models.text.engine import resolve_model_path

    prompts = json.loads((GOLDEN / "gemma3_270m_prompts.json").read_text())
    prompts = prompts["prompts"] if isinstance(prompts, dict) else prompts
    ref, lcpp = np.load(GOLDEN / "gemma3_270m_transformers.npz"), np.load(GOLDEN / "gemma3_270m_llamacpp.npz")
    golden: dict[str, np.ndarray] = {}
    for i, prompt in enumerate(prompts):
        if len(prompt["ids"]) > LONG:
            golden |= {f"ids_{i}": np.array(prompt["ids"], np.int32), f"transformers_{i}": ref[f"prefill_logits_{i}"],
                       f"llamacpp_{i}": lcpp[f"prefill_logits_{i}"], f"greedy_{i}": ref[f"greedy_{i}"],
                       f"margins_{i}": ref[f"margins_{i}"]}
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "golden_long.npz", **golden)
    shutil.copyfile(resolve_model_path("gemma-3-270m"), out / "model.gguf")
    print(f"{out}: model.gguf, golden_long.npz ({len(golden) // 5} prompts)")


def run(model_path: str, golden_path: str) -> None:
    from models.text.engine import load_text_model
    from models.text.generate import generate
    from models.text.sampler import SamplingParams

    golden = np.load(golden_path)
    prompts = sorted(int(k.split("_")[1]) for k in golden if k.startswith("ids_"))
    for int8 in (False, True):
        model = load_text_model(model_path, context_length=2048, int8_activations=int8)
        for i in prompts:
            ids = [int(t) for t in golden[f"ids_{i}"]]
            session = model.new_session()
            logits = np.asarray(session.prefill(ids), np.float64)
            session.close()
            session = model.new_session()
            greedy = generate(model, session, ids, SamplingParams(temperature=0), GREEDY, stop_ids=frozenset())
            tokens = [t.id for t in greedy]
            session.close()
            ref, lcpp = golden[f"transformers_{i}"], golden[f"llamacpp_{i}"]
            split = next((k for k, (a, b) in enumerate(zip(tokens, golden[f"greedy_{i}"])) if a != b), None)
            where = "never" if split is None else f"at step {split} (margin {golden[f'margins_{i}'][split]:.4f})"
            print(f"{'int8' if int8 else 'exact'} prompt {i} ({len(ids)} tokens): vs transformers cosine "
                  f"{cosine(logits, ref):.6f}, max |diff| {np.abs(logits - ref).max():.4f}; vs llama.cpp cosine "
                  f"{cosine(logits, lcpp):.6f}; argmax {logits.argmax()} (transformers {ref.argmax()}); "
                  f"greedy leaves transformers' {where}", flush=True)
    for i in prompts:
        ref, lcpp = golden[f"transformers_{i}"], golden[f"llamacpp_{i}"]
        print(f"llama.cpp prompt {i}: vs transformers cosine {cosine(lcpp, ref):.6f}, "
              f"max |diff| {np.abs(lcpp - ref).max():.4f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "pack":
        pack(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
