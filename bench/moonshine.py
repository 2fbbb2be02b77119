"""Moonshine transcription speed: Hearth's against transformers' MoonshineForConditionalGeneration on the same
weights, clips and machine.

Real-time factor (RTF = processing seconds / audio seconds; lower is faster) of greedy transcription of the golden
clips (tests/golden/whisper/clips), with the model loaded. Both engines get the same 16 kHz samples (decoded here by
audio/decode.py) and the same windows and token bound (models/moonshine/windows.py); transformers runs float32
generate per window (CUDA when PyTorch has it, else CPU) in a subprocess of --peer-python. The table shows median
(min-max) seconds and RTF of --reps timed runs after --warmup untimed ones, and the clips whose tokens agree.

--model is a Moonshine Hugging Face folder (config.json, model.safetensors, tokenizer.json). Without one (no package
ships Moonshine's weights), --shape tiny or base makes random weights of moonshine-tiny's or -base's shapes with
transformers (in the peer's interpreter) and a placeholder tokenizer: speed and token agreement, not text.

    .venv/bin/python bench/moonshine.py [--model DIR | --shape tiny] [--clips 21] [--peer-python PYTHON] \\
        [--warmup 1] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from bench import timing  # noqa: E402
from models.moonshine.windows import token_limit, windows  # noqa: E402

CLIPS = ROOT / "tests" / "golden" / "whisper" / "clips"
SHAPES = {  # the published configs' shapes
    "tiny": dict(hidden_size=288, intermediate_size=1152, encoder_num_hidden_layers=6, decoder_num_hidden_layers=6,
                 encoder_num_attention_heads=8, decoder_num_attention_heads=8, partial_rotary_factor=0.9),
    "base": dict(hidden_size=416, intermediate_size=1664, encoder_num_hidden_layers=8, decoder_num_hidden_layers=8,
                 encoder_num_attention_heads=8, decoder_num_attention_heads=8, partial_rotary_factor=0.62)}


def make_random(shape: str, out: Path) -> None:
    """A random-weight Moonshine folder of the real shapes, with a word-level placeholder tokenizer (peer side)."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models
    from transformers import MoonshineConfig, MoonshineForConditionalGeneration

    s = dict(SHAPES[shape])
    factor = s.pop("partial_rotary_factor")
    config = MoonshineConfig(vocab_size=32768, max_position_embeddings=194, **s, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": factor})
    torch.manual_seed(0)
    model = MoonshineForConditionalGeneration(config)
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "proj_out.weight"},
              str(out / "model.safetensors"))
    config.save_pretrained(out)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"t{i}": i for i in range(3, 32768)}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(out / "tokenizer.json"))


def run_hearth(model_dir: Path, audios: list[np.ndarray], warmup: int, reps: int) -> dict:
    from models.moonshine.model import TranscribeOptions, load_moonshine

    model = load_moonshine(str(model_dir))
    options = TranscribeOptions(language="en", temperature=0.0)
    seconds, tokens = [], []
    for rep in range(warmup + reps):
        started = time.perf_counter()
        tokens = [[t for s in model.transcribe(a, options) for t in s.tokens] for a in audios]
        if rep >= warmup:
            seconds.append(time.perf_counter() - started)
    return {"engine": "hearth", "device": model.net.executor.device.name, "seconds": seconds, "tokens": tokens}


def run_transformers(model_dir: Path, audio_file: Path, warmup: int, reps: int) -> dict:
    import torch
    from transformers import MoonshineForConditionalGeneration

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = MoonshineForConditionalGeneration.from_pretrained(model_dir).to(device).eval()
    data = np.load(audio_file)
    audios = [data[k] for k in sorted(data.files)]
    config = model.config
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def transcribe(audio: np.ndarray) -> list[int]:
        out: list[int] = []
        for start, end in windows(audio, 30 * 16000):
            x = torch.from_numpy(audio[start:end])[None].to(device)
            with torch.no_grad():
                ids = model.generate(x, max_new_tokens=token_limit(end - start, config.max_position_embeddings),
                                     do_sample=False, num_beams=1)[0].tolist()
            out += [t for t in ids[1:] if t != config.eos_token_id]
        return out

    seconds, tokens = [], []
    for rep in range(warmup + reps):
        sync()
        started = time.perf_counter()
        tokens = [transcribe(a) for a in audios]
        sync()
        if rep >= warmup:
            seconds.append(time.perf_counter() - started)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"engine": f"transformers ({device}, float32)", "device": name, "seconds": seconds, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a Moonshine Hugging Face folder")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="random weights of these shapes")
    parser.add_argument("--clips", type=int, default=21)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--peer", nargs=2, metavar=("MODEL", "AUDIO"), help=argparse.SUPPRESS)
    parser.add_argument("--make-random", metavar="DIR", help=argparse.SUPPRESS)
    timing.add_timing_args(parser, warmup=1, reps=3)
    args = parser.parse_args()
    timing.check_timing_args(parser, args)
    if args.make_random:
        make_random(args.shape, Path(args.make_random))
        return
    if args.peer:
        print(json.dumps(run_transformers(Path(args.peer[0]), Path(args.peer[1]), args.warmup, args.reps)))
        return

    from audio.decode import decode_audio

    audios = [decode_audio(p.read_bytes()) for p in sorted(CLIPS.glob("*.ogg"))[:args.clips]]
    audio_s = sum(a.size for a in audios) / 16000
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            model_dir = Path(tmp) / f"moonshine-{args.shape}-random"
            model_dir.mkdir()
            subprocess.run([args.peer_python, __file__, "--make-random", str(model_dir), "--shape", args.shape],
                           check=True, cwd=ROOT)
        audio_file = Path(tmp) / "audio.npz"
        np.savez(audio_file, **{f"{i:03d}": a for i, a in enumerate(audios)})
        hearth = run_hearth(model_dir, audios, args.warmup, args.reps)
        out = subprocess.run([args.peer_python, __file__, "--peer", str(model_dir), str(audio_file),
                              "--warmup", str(args.warmup), "--reps", str(args.reps)],
                             check=True, capture_output=True, text=True, cwd=ROOT)
        peer = json.loads(out.stdout.strip().splitlines()[-1])
    same = sum(a == b for a, b in zip(hearth["tokens"], peer["tokens"]))
    print(f"{len(audios)} clips, {audio_s:.1f} s of audio, {model_dir.name}, {platform.node()}; median (min-max) of "
          f"{args.reps} runs after {args.warmup} untimed")
    rows = [[r["engine"], r["device"], timing.cell(r["seconds"], 2), timing.cell(r["seconds"], 3, 1 / audio_s),
             f"{same}/{len(audios)}"] for r in (hearth, peer)]
    print(timing.markdown_table(["engine", "device", "seconds", "RTF", "same tokens"], rows))
    factor = timing.ratio(hearth["seconds"], peer["seconds"])
    print(f"Hearth / {peer['engine']} RTF, ratio of medians: {factor:.2f} (below 1: Hearth faster)")
    for r in (hearth, peer):
        r["seconds"] = timing.summary(r["seconds"])
    timing.write_json(args.json, {**timing.run_info("moonshine", args.warmup, args.reps), "clips": len(audios),
                           "audio_seconds": audio_s, "model": str(args.model or f"random {args.shape}"),
                           "results": [hearth, peer], "same_tokens": same, "hearth_over_peer_rtf": factor})


if __name__ == "__main__":
    main()
