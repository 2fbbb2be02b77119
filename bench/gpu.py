"""GPU-machine benchmark: Hearth beside llama.cpp (CUDA) and transformers (PyTorch CUDA) on the
same GGUF files and card, beside the memory-bandwidth bound of a decode step.

The GPU machine takes at most 64 MiB of files per call, so the models are random-weight GGUFs
with real models' shapes and tensor types (scripts/make_synthetic_gguf.py --shape 270m/1b/4b):
speed depends on shapes and types, not on the values. Every engine loads the same file.

    python bench/gpu.py s270m.gguf s1b.gguf s4b.gguf --llama-bin /tmp/llamacpp/bin [--transformers] \\
        [--warmup 10] [--reps 5] [--json bench/results/h200-text.json]

Every engine runs each measurement --warmup times untimed, then --reps times timed (bench/timing.py);
the table shows median (min-max) per engine and Hearth/llama.cpp as the ratio of medians. Measurements:
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
  server's continuous batching runs them; llama.cpp: llama-batched-bench -npp 128 -ntg 128, one
  invocation per run); Hearth again with int8 activations;
- share of the bandwidth bound: a decode step must read every weight once (but one row of an embedding table it
  only looks up) and the KV cache.
With --profile, Hearth's per-kernel GPU time (timestamp queries) for prefill and decode steps.
--json keeps every sample of every engine per model; a file that already holds other models keeps
them, so the models can run in separate calls into one file.
This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.text import prompt_ids  # noqa: E402
from bench.timing import (  # noqa: E402
    add_timing_args,
    cell,
    check_timing_args,
    markdown_table,
    ratio,
    run_info,
    summary,
    timed,
    write_json,
)

# Peak memory bandwidth from the vendors' data sheets, bytes/s.
PEAK_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12}
PROMPT, NEW, BATCH_PROMPT = 512, 128, 128


class HearthBench:
    """Hearth through its engine: prefill chunks, GPU-sampled decode, batched decode. It takes a loaded model and
    that model's DecodeRow class, so tools/perf/tree_ab.py times trees of other layouts with the same code."""

    def __init__(self, model: Any, decode_row: type) -> None:
        device = model.executor.device
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        self.model, self.decode_row = model, decode_row
        self.engine = model.engine()

    @classmethod
    def load(cls, model_path: str, max_batch: int, int8_activations: bool = False) -> HearthBench:
        from models.text.engine import DecodeRow, load_text_model

        # KV pool: the single-stream runs' 640 positions, and every batched sequence's 256 (5 pages each)
        model = load_text_model(model_path, context_length=2048, max_batch=max_batch,
                                pool_tokens=2048 + max_batch * 5 * 128, int8_activations=int8_activations)
        return cls(model, DecodeRow)

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
        from models.text.generate import generate
        from models.text.sampler import SamplingParams

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
        sessions = [self.model.new_session() for _ in range(batch)]
        try:
            for s in sessions:
                self.engine.submit_prefill(s, ids)
            rows = [self.decode_row(s) for s in sessions]
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


def bench_hearth(path: str, warmup: int, reps: int, batches: list[int], profile: bool) -> dict[str, Any]:
    """Hearth's samples (tokens/s) per measurement, and its profiles when asked."""
    hearth = HearthBench.load(path, max(batches, default=1))
    ids = prompt_ids(lambda text: hearth.model.tokenizer.encode(text, add_bos=True), PROMPT)
    short = ids[:BATCH_PROMPT]
    samples: dict[str, list[float]] = {}
    out: dict[str, Any] = {"detail": hearth.detail, "samples": samples}
    # A 270M prompt is ~10 ms of GPU work: after the model's load the GPU idles at low clocks, and a few such
    # bursts do not raise them. The warm-up runs, as many as every other engine gets, bring the clocks up.
    samples["prefill_tok_s"] = timed(lambda: PROMPT / hearth.prefill_s(ids), warmup, reps)
    out["prefill_split_ms"] = [round(1000 * t, 2) for t in hearth.prefill_split]
    # a second copy of the model, its programs int8
    int8 = HearthBench.load(path, max(batches, default=1), int8_activations=True)
    samples["prefill_int8_tok_s"] = timed(lambda: PROMPT / int8.prefill_s(ids), warmup, reps)
    if profile:
        from gpu.profile import profile_report

        out["profile_int8_prefill"] = profile_report(int8.model.executor, "prefill with int8 activations",
                                                     *int8.engine.stage_prefill(int8.model.new_session(), ids))
    samples["decode_tok_s"] = timed(lambda: NEW / hearth.decode_s(ids[:1], NEW), warmup, reps)
    samples[f"decode_d{PROMPT}_tok_s"] = timed(lambda: NEW / hearth.decode_s(ids, NEW), warmup, reps)
    samples["decode_int8_tok_s"] = timed(lambda: NEW / int8.decode_s(ids[:1], NEW), warmup, reps)
    samples[f"decode_d{PROMPT}_int8_tok_s"] = timed(lambda: NEW / int8.decode_s(ids, NEW), warmup, reps)
    if profile:
        int8_session = int8.model.new_session()
        try:
            int8.engine.submit_prefill(int8_session, ids).wait()
            label = f"decode with int8 activations, position {len(ids)}"
            out["profile_int8_decode"] = profile_report(int8.model.executor, label,
                                                        *int8.engine.stage_decode([int8_session]))
        finally:
            int8_session.close()
    print("hearth: " + ", ".join(f"{key} {cell(s, 0)}" for key, s in samples.items()), flush=True)
    for b in batches:
        samples[f"decode_x{b}_tok_s"] = timed(lambda b=b: b * NEW / hearth.batched_decode_s(short, b, NEW),
                                              warmup, reps)
        samples[f"decode_x{b}_int8_tok_s"] = timed(lambda b=b: b * NEW / int8.batched_decode_s(short, b, NEW),
                                                   warmup, reps)
        print(f"hearth: {b} streams: {cell(samples[f'decode_x{b}_tok_s'], 0)} tok/s, int8 activations "
              f"{cell(samples[f'decode_x{b}_int8_tok_s'], 0)}", flush=True)
    if profile:
        out["profile"] = hearth.profile(ids, max(batches, default=1))
        print(out["profile"], out["profile_int8_prefill"], out["profile_int8_decode"], sep="\n", flush=True)
    return out


def bench_llama(binary_dir: str, path: str, warmup: int, reps: int, batches: list[int]) -> dict[str, Any]:
    """llama.cpp's samples per measurement: llama-bench's own repetitions, one llama-batched-bench run each."""
    from bench.llama_cpp_cuda import repeat_llama_batched_bench, run_llama_bench

    single = run_llama_bench(binary_dir, path, prompt=PROMPT, gen=NEW, reps=reps, warmup=warmup)
    deep = run_llama_bench(binary_dir, path, prompt=0, gen=NEW, reps=reps, warmup=warmup, depth=PROMPT)
    samples = {"prefill_tok_s": single["prefill"]["samples_tok_s"], "decode_tok_s": single["decode"]["samples_tok_s"],
               f"decode_d{PROMPT}_tok_s": deep["decode"]["samples_tok_s"]}
    out: dict[str, Any] = {"detail": f"llama.cpp {single['build_commit']} CUDA (llama-bench, llama-batched-bench)",
                           "samples": samples, "llama_bench": [single, deep]}
    if batches:
        batched = repeat_llama_batched_bench(binary_dir, path, tuple(batches), BATCH_PROMPT, NEW, warmup, reps)
        for b in batches:
            samples[f"decode_x{b}_tok_s"] = batched["decode_samples_tok_s"][b]
        out["batched_bench"] = batched
    return out


def bench_transformers(path: str, warmup: int, reps: int) -> dict[str, Any]:
    """transformers' samples: prefill and one-stream decode, logits back to Python each step."""
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
            "samples": {"prefill_tok_s": timed(lambda: PROMPT / prefill(), warmup, reps),
                        "decode_tok_s": timed(lambda: NEW / decode(), warmup, reps)}}


# Tables a decode step looks one row up in rather than reading whole: Gemma 4's per-layer embeddings, and the token
# embeddings where the file has an output head of its own (a tied table is read whole by the logits).
LOOKUP_TABLES = ("per_layer_token_embd.weight", "token_embd.weight")


def step_read_bytes(f: Any, n_ctx_read: int) -> int:
    """Bytes one decode step of one sequence reads from a GGUFFile's weights and an f16 KV cache of n_ctx_read
    positions."""
    weights = 0
    for name, tensor in f.tensors.items():
        looked_up = name in LOOKUP_TABLES and (name != "token_embd.weight" or "output.weight" in f.tensors)
        n_rows = int(np.prod([int(n) for n in tensor.shape[1:]])) or 1
        weights += int(tensor.n_bytes) // n_rows if looked_up else int(tensor.n_bytes)
    n_layers = int(f.value("{arch}.block_count"))
    kv_heads = f.value("{arch}.attention.head_count_kv")  # per layer in some architectures (Gemma 4)
    kv_heads = [int(h) for h in kv_heads] if isinstance(kv_heads, list) else [int(kv_heads)] * n_layers
    key_length = int(f.value("{arch}.attention.key_length"))
    return weights + sum(2 * n_ctx_read * h * key_length * 2 for h in kv_heads)  # f16 K and V read once


def bandwidth_bound(model_path: str, n_ctx_read: int) -> tuple[float, str, float]:
    """(bytes a decode step reads, card name, tokens/s bound at the card's peak bandwidth)."""
    from models.formats.gguf_file import GGUFFile

    step_bytes = step_read_bytes(GGUFFile(model_path), n_ctx_read)
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:  # no NVIDIA driver: the bound is unknown
        name = "unknown GPU"
    peak = next((bw for key, bw in PEAK_BANDWIDTH.items() if key in name), float("nan"))
    return step_bytes, name, peak / step_bytes


def rows(batches: list[int]) -> list[tuple[str, str, str]]:
    """(label, Hearth's key, the peers' key): Hearth's int8 figures are set beside the peers' one figure."""
    out = [(f"prefill tok/s ({PROMPT} tokens)", "prefill_tok_s", "prefill_tok_s"),
           ("prefill, int8 activations", "prefill_int8_tok_s", "prefill_tok_s"),
           ("decode tok/s (1 stream)", "decode_tok_s", "decode_tok_s"),
           ("decode, int8 activations", "decode_int8_tok_s", "decode_tok_s"),
           (f"decode after {PROMPT} tokens", f"decode_d{PROMPT}_tok_s", f"decode_d{PROMPT}_tok_s"),
           (f"decode after {PROMPT}, int8 activations", f"decode_d{PROMPT}_int8_tok_s", f"decode_d{PROMPT}_tok_s")]
    for b in batches:
        out += [(f"decode tok/s ({b} streams)", f"decode_x{b}_tok_s", f"decode_x{b}_tok_s"),
                (f"decode, {b} streams, int8 activations", f"decode_x{b}_int8_tok_s", f"decode_x{b}_tok_s")]
    return out


def table(name: str, results: dict[str, dict[str, Any]], batches: list[int], bound: float) -> tuple[str, dict]:
    """The Markdown table of one model, and Hearth/llama.cpp per row (ratio of medians)."""
    engines = list(results)
    samples = {e: results[e]["samples"] for e in engines}
    both = "hearth" in samples and "llama.cpp" in samples
    lines, ratios = [], {}
    for label, key, peer_key in rows(batches):
        cells = [cell(samples[e].get(key if e == "hearth" else peer_key if key == peer_key else ""), 0)
                 for e in engines]
        if both:
            r = ratio(samples["hearth"].get(key), samples["llama.cpp"].get(peer_key))
            ratios[key] = r
            cells.append("-" if r is None else f"{r:.2f}")
        lines.append([label, *cells])
    if bound == bound:  # NaN where the card's peak bandwidth is not in PEAK_BANDWIDTH
        shares = [ratio(samples[e].get("decode_tok_s"), [bound]) for e in engines]
        lines.append([f"1-stream decode, share of the bound ({bound:,.0f} tok/s)",
                      *("-" if s is None else f"{s:.1%}" for s in shares), *([""] if both else [])])
    head = [name, *engines, *(["Hearth/llama.cpp"] if both else [])]
    return markdown_table(head, lines), ratios


def merged(path: Path | None, report: dict[str, Any]) -> dict[str, Any]:
    """report, with the models of an earlier --json file at path that this run did not measure."""
    if path is None or str(path) == "-" or not path.exists():
        return report
    earlier = json.loads(path.read_text())
    if earlier.get("benchmark") != report["benchmark"]:
        return report
    return {**report, "models": {**earlier.get("models", {}), **report["models"]}}


def main() -> int:
    """Per model: each engine asked for, its table, and the JSON after every model."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="GGUF files")
    parser.add_argument("--llama-bin", help="directory of llama-bench and llama-batched-bench (CUDA build)")
    parser.add_argument("--transformers", action="store_true", help="also run transformers on PyTorch CUDA")
    parser.add_argument("--batches", default="8,32", help="concurrent sequences of the batched decode ('': none)")
    parser.add_argument("--profile", action="store_true", help="print Hearth's per-kernel profile per model")
    add_timing_args(parser, warmup=10)
    args = parser.parse_args()
    check_timing_args(parser, args)
    json_path = Path(args.json) if args.json else None
    batches = [int(b) for b in args.batches.split(",") if b]
    report: dict[str, Any] = {"benchmark": "gpu-text", "models": {}}
    for path in args.models:
        info = run_info("gpu-text", args.warmup, args.reps)
        engines = (("hearth", lambda: bench_hearth(path, args.warmup, args.reps, batches, args.profile)),
                   ("llama.cpp", (lambda: bench_llama(args.llama_bin, path, args.warmup, args.reps, batches))
                    if args.llama_bin else None),
                   ("transformers", (lambda: bench_transformers(path, args.warmup, args.reps))
                    if args.transformers else None))
        results: dict[str, dict[str, Any]] = {}
        for name, run in engines:
            if run is None:
                continue
            try:
                results[name] = run()
            except Exception as error:  # noqa: BLE001 - one engine failing still leaves the others' figures
                print(f"{name} on {path} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        step_bytes, card, bound = bandwidth_bound(path, PROMPT + NEW // 2)
        text, ratios = table(Path(path).stem, results, batches, bound)
        print(f"\n{card}; {Path(path).name}: a decode step reads {step_bytes / 1e6:.0f} MB; median (min-max) of "
              f"{args.reps} runs after {args.warmup} untimed, every engine")
        print(text, flush=True)
        for result in results.values():
            result["metrics"] = {key: summary(s) for key, s in result.pop("samples").items()}
        report["models"][Path(path).name] = {**info, "path": path, "card": card, "step_bytes": step_bytes,
                                             "bound_tok_s": bound, "hearth_over_llama_cpp": ratios,
                                             "results": results}
        if json_path:  # after every model, so that a call cut short keeps the models it finished
            write_json(json_path, merged(json_path, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
