"""Image input on the GPU machine: Hearth's Gemma 3 image encoder beside llama.cpp's mtmd path (llama-mtmd-cli, CUDA)
on the same text GGUF, projector GGUF and photo.

The GPU machine takes the real files in no call, so both engines load random-weight files with Gemma 3 4B's shapes
(scripts/make_synthetic_gguf.py: `--shape 4b` for the text model, `--shape gemma3-4b-mmproj` for the projector, its
27-layer SigLIP tower at 896 px); speed depends on shapes and types, not on the values.

    python bench/vision.py --model s4b.gguf --mmproj mmproj.gguf --llama-bin /tmp/llamacpp/bin [--json out.json]
    python bench/vision.py --tiny            # tests/golden/vision's tiny files: a check of the script, any machine

Measurements, each --warmup times untimed then --reps times timed, every engine alike (bench/timing.py):
- image encode ms: one preprocessed 896 x 896 image (the same photo, preprocessed by each engine as its reference
  does) to its 256 projected soft tokens on the host. Hearth: the encoder's encode() wall time (the patches cut on
  the host, the tower and projector on the GPU, the rows read back). llama.cpp: its own "mtmd batch encoding done
  in N ms" (mtmd_batch_encode: the clip graph and the copy of its output to the host; whole milliseconds).
- time to first token ms of a one-image chat prompt (Gemma's turn format with the image before the text, as
  llama-mtmd-cli builds it: `<bos><start_of_turn>user\\n<start_of_image>` + 256 image rows + `<end_of_image>` + the
  text + `<end_of_turn>\\n<start_of_turn>model\\n`): the image's encode, the prefill of the whole prompt with the
  image's rows, and the first sampled token (greedy). Hearth: wall time from the pixels to the sampled token on the
  host. llama.cpp: the encode's figure plus its "prompt eval time" (llama_perf: every prompt batch, text and image
  rows, each timed to its synchronisation); the host's few steps between them and the sampling are not in it.
llama-mtmd-cli runs once per sample (`-n 1`, every layer and the projector on the GPU, flash attention on); it loads
the models and runs its own warm-up before each, untimed; the --warmup invocations before the timed ones are dropped.
Where this tree's engine cannot yet take image rows in a prompt (Engine.submit_prefill without `images`), Hearth's
prefill runs the same token count with the image rows as token embeddings, and the JSON says so (`image_rows`).
This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing import (  # noqa: E402
    ROOT,
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

VISION = ROOT / "tests" / "golden" / "vision"
PHOTO = VISION / "photos" / "china.jpg"
TINY_MODEL, TINY_MMPROJ = VISION / "gemma3_tiny.f32.gguf", VISION / "mmproj-gemma3_tiny.f16.gguf"
PROMPT = "Describe this image in one sentence."
# llama-mtmd-cli with llama.cpp's built-in "gemma" template renders one user turn so; its `<__media__>` marker (put
# before the text) becomes `<start_of_image>`, the image's rows, `<end_of_image>` (tools/mtmd/mtmd.cpp).
TURN = ("<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n")
IMAGE_BEGIN, IMAGE_END, SOFT = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
LOG_ATTEMPTS = 3  # llama-mtmd-cli runs per sample at most, should its log lose its timings (run_mtmd)
CONTEXT = 1024  # positions: the prompt is under 300
ROWS = (("encode_ms", "image encode ms"), ("ttft_ms", "time to first token ms"))


class HearthVision:
    """Hearth's text model and image encoder on one executor, and the one-image prompt's ids."""

    def __init__(self, model_path: str, mmproj_path: str, photo: Path, prompt: str) -> None:
        from PIL import Image

        from models.formats.gguf_file import GGUFFile
        from models.text.engine import Engine, load_text_model
        from models.vision.projector import load_image_encoder

        trained = int(GGUFFile(model_path).value("{arch}.context_length", CONTEXT))
        self.model = load_text_model(model_path, context_length=min(CONTEXT, trained), max_batch=1)
        attached = getattr(self.model, "image_encoder", None)  # a tree that loads the projector beside the model
        same = attached is not None and Path(attached.path).resolve() == Path(mmproj_path).resolve()
        self.encoder = attached if same else load_image_encoder(mmproj_path, self.model.executor)
        device = self.model.executor.device
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        self.engine = self.model.engine()
        self.splices = "images" in inspect.signature(Engine.submit_prefill).parameters
        self.pixels = np.asarray(self.encoder.preprocess(Image.open(photo).convert("RGB")), np.float32)[None]
        tok = self.model.tokenizer
        before = tok.encode(TURN[0] + IMAGE_BEGIN, add_bos=True)
        after = tok.encode(IMAGE_END + prompt + TURN[1], add_bos=False)
        soft = tok.encode(SOFT, add_bos=False)  # the rows' ids count as tokens only; their inputs are the image's
        soft_id = soft[0] if len(soft) == 1 else 0
        self.image_start = len(before)
        self.ids = before + [soft_id] * self.encoder.tokens_per_image + after

    def encode_ms(self) -> float:
        """Milliseconds from the preprocessed pixels to the soft tokens on the host."""
        started = time.perf_counter()
        self.encoder.encode(self.pixels)
        return 1000 * (time.perf_counter() - started)

    def ttft_ms(self) -> float:
        """Milliseconds from the preprocessed pixels to the first sampled token of the prompt, in a new session."""
        session = self.model.new_session()
        try:
            started = time.perf_counter()
            rows = self.encoder.encode(self.pixels)[0]
            extra = {"images": [(self.image_start, rows)]} if self.splices else {}
            self.engine.submit_prefill(session, self.ids, **extra).wait()  # the sampled token is back: it has run
            return 1000 * (time.perf_counter() - started)
        finally:
            session.close()


def bench_hearth(model: str, mmproj: str, photo: Path, prompt: str, warmup: int, reps: int) -> dict[str, Any]:
    """Hearth's samples (ms) per measurement."""
    h = HearthVision(model, mmproj, photo, prompt)
    c = h.encoder.config  # type: ignore[attr-defined]
    samples = {"encode_ms": timed(h.encode_ms, warmup, reps), "ttft_ms": timed(h.ttft_ms, warmup, reps)}
    print("hearth: " + ", ".join(f"{key} {cell(s)}" for key, s in samples.items()), flush=True)
    return {"detail": h.detail, "samples": samples, "prompt_tokens": len(h.ids),
            "image_rows": "image embeddings" if h.splices else "token embeddings (no image rows in this tree)",
            "tower": {"image_size": c.image_size, "patch_size": c.patch_size, "width": c.d_model,
                      "layers": c.n_layers, "heads": c.n_heads, "ffn": c.d_ffn, "tokens": c.tokens_per_image,
                      "text_width": c.d_text}}


_ENCODED = re.compile(r"(?:mtmd batch encoding done in|image slice encoded in) (\d+) ms")
_DECODED = re.compile(r"image decoded \(batch \d+/\d+\) in (\d+) ms")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_BACKEND = re.compile(r"CLIP using (\S+) backend")


def parse_mtmd(log: str) -> dict[str, Any]:
    """llama-mtmd-cli's own timings in its log: encode ms, image-row decode ms, prompt eval ms and tokens."""
    encoded, prompt_eval = _ENCODED.findall(log), _PROMPT_EVAL.search(log)
    if len(encoded) != 1 or prompt_eval is None:
        raise RuntimeError(f"llama-mtmd-cli's log holds {len(encoded)} image encode times and "
                           f"{'a' if prompt_eval else 'no'} prompt eval time:\n{log[-3000:]}")
    out: dict[str, Any] = {"encode_ms": float(encoded[0]), "image_decode_ms": sum(map(float, _DECODED.findall(log))),
                           "prompt_eval_ms": float(prompt_eval[1]), "prompt_tokens": int(prompt_eval[2])}
    backend = _BACKEND.search(log)
    out["clip_backend"] = backend[1] if backend else None
    return out


def run_mtmd(binary_dir: str, model: str, mmproj: str, photo: Path, prompt: str,
             timeout: float = 600) -> dict[str, Any]:
    """One llama-mtmd-cli run of the one-image prompt, one greedy token, everything on the GPU; its timings."""
    from bench.llama_cpp_cuda import _run

    # --no-jinja: "gemma" names llama.cpp's built-in template (with jinja it would be read as a template's text)
    args = ["-m", model, "--mmproj", mmproj, "--image", str(photo), "-p", prompt, "-n", "1", "--temp", "0",
            "-ngl", "99", "-fa", "on", "-c", str(CONTEXT), "--no-jinja", "--chat-template", "gemma", "-lv", "4"]
    # llama.cpp's logger writes from a thread of its own and may lose its last lines at exit (its common/log.cpp says
    # so): the perf lines at the end of a run are missing now and then, more often on a busy host. Such a run is
    # made again, up to LOG_ATTEMPTS times; the result counts the runs that lost them.
    for attempt in range(LOG_ATTEMPTS):
        proc = _run(binary_dir, "llama-mtmd-cli", args, timeout)
        try:
            figures = parse_mtmd(proc.stdout + "\n" + proc.stderr)
        except RuntimeError:
            if attempt == LOG_ATTEMPTS - 1:
                raise
            continue
        return {**figures, "lost_logs": attempt, "command": ["llama-mtmd-cli", *args]}
    raise AssertionError("unreachable")


def bench_llama(binary_dir: str, model: str, mmproj: str, photo: Path, prompt: str, warmup: int,
                reps: int) -> dict[str, Any]:
    """llama.cpp's samples (ms): `warmup` untimed invocations, then one per timed repetition."""
    info = Path(binary_dir) / "BUILD_INFO"  # bench/llama_cpp_cuda.sh's note of the build
    build = info.read_text().splitlines()[0] if info.is_file() else "llama.cpp"
    for _ in range(warmup):
        run_mtmd(binary_dir, model, mmproj, photo, prompt)
    runs = [run_mtmd(binary_dir, model, mmproj, photo, prompt) for _ in range(reps)]
    samples = {"encode_ms": [r["encode_ms"] for r in runs],
               "ttft_ms": [r["encode_ms"] + r["prompt_eval_ms"] for r in runs],
               "prompt_eval_ms": [r["prompt_eval_ms"] for r in runs],
               "image_decode_ms": [r["image_decode_ms"] for r in runs]}
    print("llama.cpp: " + ", ".join(f"{key} {cell(s)}" for key, s in samples.items()), flush=True)
    return {"detail": f"{build}: llama-mtmd-cli, projector on {runs[0]['clip_backend']}", "samples": samples,
            "prompt_tokens": runs[0]["prompt_tokens"], "command": runs[0]["command"],
            "runs_that_lost_their_log": sum(r["lost_logs"] for r in runs)}


def table(results: dict[str, dict[str, Any]]) -> tuple[str, dict[str, float | None]]:
    """The Markdown table and Hearth/llama.cpp per row (ratio of medians: below 1, Hearth is faster)."""
    engines = list(results)
    both = "hearth" in results and "llama.cpp" in results
    lines, ratios = [], {}
    for key, label in ROWS:
        cells = [cell(results[e]["samples"].get(key)) for e in engines]
        if both:
            ratios[key] = ratio(results["hearth"]["samples"].get(key), results["llama.cpp"]["samples"].get(key))
            cells.append("-" if ratios[key] is None else f"{ratios[key]:.2f}")
        lines.append([label, *cells])
    return markdown_table(["", *engines, *(["Hearth/llama.cpp"] if both else [])], lines), ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="text GGUF (Gemma 3)")
    parser.add_argument("--mmproj", help="projector GGUF (llama.cpp's mmproj, projector type gemma3)")
    parser.add_argument("--tiny", action="store_true",
                        help="tests/golden/vision's tiny text model and F16 projector (a check of the script)")
    parser.add_argument("--image", type=Path, default=PHOTO, help=f"the photo ({PHOTO.relative_to(ROOT)})")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--llama-bin", help="directory of llama-mtmd-cli (bench/llama_cpp_cuda.sh); none: Hearth only")
    add_timing_args(parser, warmup=5)
    args = parser.parse_args()
    check_timing_args(parser, args)
    if args.tiny:
        args.model, args.mmproj = args.model or str(TINY_MODEL), args.mmproj or str(TINY_MMPROJ)
    if not args.model or not args.mmproj:
        parser.error("give --model and --mmproj, or --tiny")
    if args.llama_bin and not (Path(args.llama_bin) / "llama-mtmd-cli").is_file():
        print(f"no llama-mtmd-cli in {args.llama_bin}: Hearth only", file=sys.stderr, flush=True)
        args.llama_bin = None
    engines = (("hearth", lambda: bench_hearth(args.model, args.mmproj, args.image, args.prompt, args.warmup,
                                               args.reps)),
               ("llama.cpp", (lambda: bench_llama(args.llama_bin, args.model, args.mmproj, args.image, args.prompt,
                                                  args.warmup, args.reps)) if args.llama_bin else None))
    results: dict[str, dict[str, Any]] = {}
    for name, run in engines:
        if run is None:
            continue
        try:
            results[name] = run()
        except Exception as error:  # noqa: BLE001 - one engine failing still leaves the other's figures
            print(f"{name} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    if not results:
        return 1
    text, ratios = table(results)
    tokens = ", ".join(f"{e} {r['prompt_tokens']}" for e, r in results.items())
    print(f"\n{Path(args.model).name} + {Path(args.mmproj).name}, {args.image.name}; prompt tokens: {tokens}; "
          f"median (min-max) of {args.reps} runs after {args.warmup} untimed, every engine")
    print(text, flush=True)
    for result in results.values():
        result["metrics"] = {key: summary(s) for key, s in result.pop("samples").items()}
    write_json(args.json, {**run_info("gpu-vision", args.warmup, args.reps), "model": args.model,
                           "mmproj": args.mmproj, "image": str(args.image), "prompt": args.prompt,
                           "hearth_over_llama_cpp": ratios, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
