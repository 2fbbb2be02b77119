"""GPU-machine benchmark: Hearth beside llama.cpp (CUDA) and transformers (PyTorch CUDA) on the
same GGUF files and card, beside the memory-bandwidth bound of a decode step.

The GPU machine takes at most 64 MiB of files per call, so the models are random-weight GGUFs
with real models' shapes and tensor types (scripts/make_synthetic_gguf.py --shape 270m/1b/4b):
speed depends on shapes and types, not on the values. Every engine loads the same file.

    python bench/gpu.py s270.gguf s1b.gguf s4b.gguf [--llama-bin DIR] [--transformers] [--json out.json]

Per model, medians of --reps runs after a warm-up:
- prefill tok/s: one 512-token prompt; Hearth twice: as it runs by default (f32 matmuls, exact
  parity) and with int8_activations (activations quantised to 8 bits inside the matmuls and the
  K-quant decode matvecs, which is what llama.cpp's CUDA matmuls and matvecs do); the one-stream
  decode figures too;
- decode tok/s, one stream: 128 greedy tokens from an empty cache, as llama-bench's tg128 runs
  them (Hearth and transformers: after a one-token prompt, so at positions 1..128); and again
  after the 512-token prompt (positions 512..640; llama-bench `-d 512`), where attention over the
  cache weighs more. Hearth samples on the GPU and keeps tokens there (8 steps per submission, the
  next submission recorded while the GPU runs); llama-bench reads no logits; transformers
  returns logits to Python each step;
- decode tok/s at 8 and 32 concurrent sequences (aggregate): each sequence has a 128-token
  prompt, then all decode 128 tokens together (Hearth: one batched program per step, as its
  server's continuous batching runs them; llama.cpp: llama-batched-bench -npp 128 -ntg 128);
- share of the bandwidth bound: a decode step must read every weight once and the KV cache.
With --profile, Hearth's per-kernel GPU time (timestamp queries) for prefill and decode steps.
This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.text import prompt_ids  # noqa: E402

# Peak memory bandwidth from the vendors' data sheets, bytes/s.
PEAK_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12}
PROMPT, NEW, BATCH_PROMPT = 512, 128, 128


class HearthBench:
    """Hearth through its engine: prefill chunks, GPU-sampled decode, batched decode."""

    def __init__(self, model_path: str, max_batch: int, int8_activations: bool = False) -> None:
        from gpu.device import default_device
        from models.text_model import load_text_model

        device = default_device()
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        # KV pool: the single-stream runs' 640 positions, and every batched sequence's 256 (5 pages each)
        self.model = load_text_model(model_path, context_length=2048, max_batch=max_batch,
                                     pool_tokens=2048 + max_batch * 5 * 128, int8_activations=int8_activations)
        self.engine = self.model.engine()

    def prefill_s(self, ids: list[int]) -> float:
        session = self.model.new_session()
        try:
            started = time.perf_counter()
            pending = self.engine.submit_prefill(session, ids)
            submitted = time.perf_counter()
            pending.wait()  # the sampled token comes back: the step has run
            done = time.perf_counter()
            self.prefill_split = (submitted - started, done - submitted)  # host recording+submit, then waiting
            return done - started
        finally:
            session.close()

    def decode_s(self, ids: list[int], n: int) -> float:
        """Seconds for n greedy tokens after the prompt (the prompt's prefill not counted)."""
        from models.generate import generate
        from models.sampler import SamplingParams

        session = self.model.new_session()
        try:
            tokens = generate(self.model, session, ids, SamplingParams(temperature=0), n + 1, stop_ids=frozenset())
            next(tokens)  # the first token comes from the prefill
            started = time.perf_counter()
            count = sum(1 for _ in tokens)
            assert count == n
            return time.perf_counter() - started
        finally:
            session.close()

    def batched_decode_s(self, ids: list[int], batch: int, n: int, steps_per_submit: int = 8) -> float:
        """Seconds for n decode steps of `batch` sequences together (after their prefills)."""
        from models.text_model import DecodeRow

        sessions = [self.model.new_session() for _ in range(batch)]
        try:
            for s in sessions:
                self.engine.submit_prefill(s, ids)
            rows = [DecodeRow(s) for s in sessions]
            self.engine.submit_decode(rows, 1).wait()  # prefills done, the batch program built
            started = time.perf_counter()
            left, pending = n, None
            while left > 0 or pending is not None:
                following = None
                if left > 0:
                    k = min(steps_per_submit, left)
                    following = self.engine.submit_decode(rows, k)
                    left -= k
                if pending is not None:
                    pending.wait()
                pending = following
            return time.perf_counter() - started
        finally:
            for s in sessions:
                s.close()

    def profile(self, ids: list[int], batch: int) -> str:
        from gpu.profile import profile_report

        sessions = [self.model.new_session() for _ in range(batch)]
        try:
            for s in sessions:
                self.engine.submit_prefill(s, ids).wait()
            sessions[0].reset()
            report = [profile_report(self.model.executor, "prefill", *self.engine.stage_prefill(sessions[0], ids))]
            sessions[0].n_past = NEW // 2
            report.append(profile_report(self.model.executor, f"decode of 1 sequence at position {NEW // 2}",
                                         *self.engine.stage_decode(sessions[:1])))
            sessions[0].n_past = len(ids)
            for b in sorted({1, batch}):
                label = f"decode of {b} sequence(s) at position {len(ids)}"
                report.append(profile_report(self.model.executor, label, *self.engine.stage_decode(sessions[:b])))
            return "\n".join(report)
        finally:
            for s in sessions:
                s.close()


def median_of(reps: int, run: Any, warm_ups: int = 1) -> float:
    for _ in range(warm_ups):  # pipelines, programs, first touches (and the GPU's clocks: see bench_hearth)
        run()
    return statistics.median(run() for _ in range(reps))


def bench_hearth(path: str, reps: int, batches: list[int], profile: bool) -> dict[str, Any]:
    hearth = HearthBench(path, max(batches, default=1))
    ids = prompt_ids(lambda text: hearth.model.tokenizer.encode(text, add_bos=True), PROMPT)
    short = ids[:BATCH_PROMPT]
    out: dict[str, Any] = {"detail": hearth.detail}
    # A 270M prompt is ~10 ms of GPU work: after the model's load the GPU idles at low clocks, and a few such
    # bursts do not raise them (an H100 run measured 46 ms a prompt where its profile summed 9 ms). llama-bench
    # runs its prompts back to back after a warm-up; so do these, after 20 untimed ones.
    out["prefill_tok_s"] = PROMPT / median_of(reps, lambda: hearth.prefill_s(ids), warm_ups=20)
    out["prefill_split_ms"] = [round(1000 * t, 2) for t in hearth.prefill_split]
    int8 = HearthBench(path, 1, int8_activations=True)  # a second copy of the model, its programs int8
    out["prefill_int8_tok_s"] = PROMPT / median_of(reps, lambda: int8.prefill_s(ids), warm_ups=20)
    if profile:
        from gpu.profile import profile_report

        out["profile_int8_prefill"] = profile_report(int8.model.executor, "prefill with int8 activations",
                                                     *int8.engine.stage_prefill(int8.model.new_session(), ids))
    out["decode_tok_s"] = NEW / median_of(reps, lambda: hearth.decode_s(ids[:1], NEW))
    out[f"decode_d{PROMPT}_tok_s"] = NEW / median_of(reps, lambda: hearth.decode_s(ids, NEW))
    out["decode_int8_tok_s"] = NEW / median_of(reps, lambda: int8.decode_s(ids[:1], NEW))
    out[f"decode_d{PROMPT}_int8_tok_s"] = NEW / median_of(reps, lambda: int8.decode_s(ids, NEW))
    if profile:
        int8_session = int8.model.new_session()
        try:
            int8.engine.submit_prefill(int8_session, ids).wait()
            label = f"decode with int8 activations, position {len(ids)}"
            out["profile_int8_decode"] = profile_report(int8.model.executor, label,
                                                        *int8.engine.stage_decode([int8_session]))
        finally:
            int8_session.close()
    print(f"hearth: {out}", flush=True)
    for b in batches:
        out[f"decode_x{b}_tok_s"] = b * NEW / median_of(reps, lambda b=b: hearth.batched_decode_s(short, b, NEW))
        print(f"hearth: {b} streams: {out[f'decode_x{b}_tok_s']:.0f} tok/s", flush=True)
    if profile:
        out["profile"] = hearth.profile(ids, max(batches, default=1))
        print(out["profile"], out["profile_int8_prefill"], out["profile_int8_decode"], sep="\n", flush=True)
    return out


def bench_llama(binary_dir: str, path: str, reps: int, batches: list[int]) -> dict[str, Any]:
    from bench.llama_cpp_cuda import run_llama_batched_bench, run_llama_bench

    single = run_llama_bench(binary_dir, path, prompt=PROMPT, gen=NEW, reps=reps)
    deep = run_llama_bench(binary_dir, path, prompt=0, gen=NEW, reps=reps, depth=PROMPT)
    # medians of the reps, as Hearth's: llama-bench's first timed prefill runs at half speed or less (H100, 4B:
    # 8,962 tok/s, then 13,121-13,308), so its mean understates it
    out = {"detail": "llama.cpp CUDA (llama-bench, llama-batched-bench)",
           "prefill_tok_s": single["prefill_tok_s_median"], "decode_tok_s": single["decode_tok_s_median"],
           f"decode_d{PROMPT}_tok_s": deep["decode_tok_s_median"]}
    batched = run_llama_batched_bench(binary_dir, path, parallel=tuple(batches), prompt=BATCH_PROMPT, gen=NEW)
    for b in batches:
        out[f"decode_x{b}_tok_s"] = batched["decode_tok_s"][b]
    return out


def bench_transformers(path: str, reps: int) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache

    p = Path(path)
    model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, torch_dtype=torch.bfloat16,
                                                 attn_implementation="eager").to("cuda").eval()
    ids = list(np.random.default_rng(0).integers(10, model.config.vocab_size, PROMPT))

    def forward(tokens: list[int], cache: Any) -> tuple[int, Any]:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([tokens], device="cuda"), past_key_values=cache, use_cache=True)
            return int(out.logits[0, -1].argmax()), out.past_key_values

    def prefill() -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        forward(ids, DynamicCache(config=model.config))
        return time.perf_counter() - started

    def decode() -> float:  # from a one-token prompt, as the others' 1-stream figure
        token, cache = forward(ids[:1], DynamicCache(config=model.config))
        started = time.perf_counter()
        for _ in range(NEW):
            token, cache = forward([token], cache)
        return time.perf_counter() - started

    return {"detail": f"transformers {transformers.__version__}, torch {torch.__version__}, bf16, eager",
            "prefill_tok_s": PROMPT / median_of(reps, prefill), "decode_tok_s": NEW / median_of(reps, decode)}


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


def table(name: str, results: dict[str, dict[str, Any]], batches: list[int], bound: float) -> str:
    engines = list(results)
    # (label, Hearth's key, the peers' key): Hearth's int8 prefill is set beside the peers' one prefill figure
    rows = [("prefill tok/s (512)", "prefill_tok_s", "prefill_tok_s"),
            ("  int8 activations", "prefill_int8_tok_s", "prefill_tok_s"),
            ("decode tok/s (1 stream)", "decode_tok_s", "decode_tok_s"),
            ("  int8 activations", "decode_int8_tok_s", "decode_tok_s"),
            (f"  same after {PROMPT} tokens", f"decode_d{PROMPT}_tok_s", f"decode_d{PROMPT}_tok_s"),
            ("  int8 activations", f"decode_d{PROMPT}_int8_tok_s", f"decode_d{PROMPT}_tok_s")]
    rows += [(f"decode tok/s ({b} streams)", f"decode_x{b}_tok_s", f"decode_x{b}_tok_s") for b in batches]
    ratio = "hearth" in results and "llama.cpp" in results
    lines = [f"{name:<28}" + "".join(f"{e:>14}" for e in engines) + (f"{'Hearth/llama':>14}" if ratio else "")]
    for label, key, peer_key in rows:
        values = [results[e].get(key if e == "hearth" else peer_key if key == peer_key else None) for e in engines]
        line = f"{label:<28}" + "".join(f"{v:>14.0f}" if v is not None else f"{'-':>14}" for v in values)
        if ratio and results["hearth"].get(key) and results["llama.cpp"].get(peer_key):
            line += f"{results['hearth'][key] / results['llama.cpp'][peer_key]:>14.2f}"
        lines.append(line)
    shares = [results[e].get("decode_tok_s", 0.0) / bound for e in engines]
    lines.append(f"{'1-stream share of bound':<28}" + "".join(f"{s:>14.1%}" for s in shares)
                 + f"   (bound {bound:.0f} tok/s)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="GGUF files")
    parser.add_argument("--llama-bin", help="directory of llama-bench and llama-batched-bench (CUDA build)")
    parser.add_argument("--transformers", action="store_true", help="also run transformers on PyTorch CUDA")
    parser.add_argument("--batches", default="8,32")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print Hearth's per-kernel profile per model")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--attention-groups", type=int, help="Hearth: decode attention's workgroups wanted "
                        "(gpu/ops/transformer.py ATTENTION_GROUPS)")
    parser.add_argument("--matvec-max-tokens", type=int, help="Hearth: steps of up to this many rows use matvec "
                        "kernels rather than matmul tiles (gpu/ops/matmul.py MATVEC_MAX_TOKENS; at most 8)")
    args = parser.parse_args()
    if args.matvec_max_tokens:
        from gpu.ops import matmul

        matmul.MATVEC_MAX_TOKENS = args.matvec_max_tokens
    if args.attention_groups:
        from gpu.ops import transformer

        transformer.ATTENTION_GROUPS = args.attention_groups
    batches = [int(b) for b in args.batches.split(",") if b]  # "" : single-stream figures only
    report: dict[str, Any] = {}
    for path in args.models:
        results: dict[str, dict[str, Any]] = {}
        for name, run in (("hearth", lambda: bench_hearth(path, args.reps, batches, args.profile)),
                          ("llama.cpp", (lambda: bench_llama(args.llama_bin, path, args.reps, batches))
                           if args.llama_bin else None),
                          ("transformers", (lambda: bench_transformers(path, args.reps)) if args.transformers
                           else None)):
            if run is None:
                continue
            try:
                results[name] = run()
            except Exception as error:  # noqa: BLE001 - one engine failing still leaves the others' figures
                print(f"{name} on {path} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        step_bytes, card, bound = bandwidth_bound(path, PROMPT + NEW // 2)
        print(f"\n{card}; {Path(path).name}: a decode step reads {step_bytes / 1e6:.0f} MB")
        print(table(Path(path).stem, results, batches, bound), flush=True)
        report[path] = {"card": card, "step_bytes": step_bytes, "bound_tok_s": bound, "results": results}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
