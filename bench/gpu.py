"""GPU-machine benchmark: Hearth beside transformers (PyTorch CUDA) on the same GGUF, and beside
the memory-bandwidth bound of a decode step.

The GPU machine takes at most 64 MiB of files per call, so the model is a random-weight GGUF
with a real model's shapes and tensor types (scripts/make_synthetic_gguf.py): speed depends on
shapes and types, not on the values. Both engines load the same file; transformers dequantises
it to bf16 and runs eager attention with its KV cache. Same protocol as bench/text.py: one
warm-up, then --reps runs of a 512-token prefill and 128 greedy decode steps, medians shown.

    python bench/gpu.py --model s270.gguf [--engines hearth,transformers] [--json out.json]

Bandwidth bound: a decode step must read every weight once (the tied embedding is the output
head) plus the KV cache so far; bytes / the card's peak bandwidth is the fastest a step can be.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.text import HearthEngine, Result, measure, prompt_ids  # noqa: E402

# Peak memory bandwidth from the vendors' data sheets, bytes/s.
PEAK_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12}


class TransformersEngine:
    """transformers on PyTorch CUDA in bf16, loading the same GGUF (dequantised at load)."""

    name = "transformers"

    def __init__(self, model_path: str) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, DynamicCache

        self.torch, self.cache_type = torch, DynamicCache
        path = Path(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, torch_dtype=torch.bfloat16, attn_implementation="eager"
        ).to("cuda").eval()
        self.detail = f"transformers {transformers.__version__}, torch {torch.__version__}, bf16, eager"
        self.cache = None

    def _forward(self, ids: list[int]) -> np.ndarray:
        with self.torch.no_grad():
            tensor = self.torch.tensor([ids], device="cuda")
            out = self.model(input_ids=tensor, past_key_values=self.cache, use_cache=True)
            self.cache = out.past_key_values
            return out.logits[0, -1].float().cpu().numpy()

    def prefill(self, ids: list[int]) -> np.ndarray:
        return self._forward(ids)

    def decode(self, token: int) -> np.ndarray:
        return self._forward([token])

    def reset(self) -> None:
        self.cache = self.cache_type(config=self.model.config)


def bandwidth_bound(model_path: str, n_ctx_read: int) -> tuple[float, str, float]:
    """(bytes a decode step reads, card name, tokens/s bound at the card's peak bandwidth)."""
    from models.gguf_file import GGUFFile

    f = GGUFFile(model_path)
    n_layers = int(f.value("{arch}.block_count"))
    kv_width = int(f.value("{arch}.attention.head_count_kv")) * int(f.value("{arch}.attention.key_length"))
    step_bytes = f.tensor_bytes + 2 * n_layers * n_ctx_read * kv_width * 2  # f16 K and V read once
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    peak = next((bw for key, bw in PEAK_BANDWIDTH.items() if key in name), float("nan"))
    return step_bytes, name, peak / step_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--engines", default="hearth,transformers")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    n_prompt, n_new = 512, 128
    results: dict[str, Result] = {}
    hearth = HearthEngine(args.model, n_ctx=2048)
    ids = prompt_ids(hearth.tokenize, n_prompt)
    for name in args.engines.split(","):
        engine = hearth if name == "hearth" else TransformersEngine(args.model)
        results[engine.name] = measure(engine, engine.detail, ids, n_new, args.reps)
    step_bytes, card, bound = bandwidth_bound(args.model, n_prompt + n_new // 2)
    print(f"\n{card}; {args.model}: a decode step reads {step_bytes / 1e6:.0f} MB")
    print(f"{'':<26}" + "".join(f"{n:>14}" for n in results) + f"{'bandwidth bound':>18}")
    print(f"{'prefill tok/s (512)':<26}" + "".join(f"{r.prefill_median:>14.0f}" for r in results.values()))
    decode = [r.decode_median for r in results.values()]
    print(f"{'decode tok/s (128)':<26}" + "".join(f"{v:>14.1f}" for v in decode) + f"{bound:>18.0f}")
    print(f"{'share of the bound':<26}" + "".join(f"{v / bound:>14.1%}" for v in decode))
    if args.json:
        args.json.write_text(json.dumps({"card": card, "model": args.model, "step_bytes": step_bytes,
                                         "bound_tok_s": bound,
                                         "results": {k: vars(v) for k, v in results.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
