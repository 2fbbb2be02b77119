r"""Parity fixture for Moonshine (models/moonshine/): a tiny random-weight MoonshineForConditionalGeneration made with
transformers, saved as a Hugging Face folder (config.json, model.safetensors, tokenizer.json), with transformers'
float32 outputs on a real speech clip as golden data.

No PyPI package ships Moonshine's weights (useful-moonshine-onnx downloads its ONNX files from the Hugging Face hub at
run time), but that wheel ships the real tokenizer.json (a SentencePiece-style BPE with byte fallback, 32,000 pieces)
and a speech clip, beckett.wav. The fixture's tokenizer is that tokenizer trimmed to its first VOCAB ids (the three
specials, the 256 byte pieces and the first merges; merges kept where all three pieces survive), and its audio the
first CLIP_SECONDS of beckett.wav.

The model is moonshine-tiny's config shrunk (hidden 32, 2 heads of 16 dims with partial_rotary_factor 0.9, so 14 of
16 dims rotate; 2 encoder and 2 decoder layers); matrices N(0, 0.2^2) so the greedy path is decided by wide margins,
LayerNorm and GroupNorm weights 1 +- 0.2 so a wrong norm convention shows, biases N(0, 0.1^2); the first
seed whose greedy run uses at least MIN_DISTINCT distinct tokens.

Outputs in --out (tests/golden/moonshine): the HF folder files, clip.wav (16-bit mono 16 kHz) and golden.npz:
encoder float32 [frames, 32] (transformers' encoder on the clip), tokens int32 (greedy generate from <s>, at most
max_tokens new tokens, as models/moonshine/model.py bounds them: 6.5 per second of audio), logits0 float32 [V] (the
first decoder step's logits).

    pip download --no-deps useful-moonshine-onnx -d /tmp/ms && unzip -o /tmp/ms/*.whl -d /tmp/ms/wheel
    /work/refvenv/bin/python scripts/make_moonshine_fixtures.py --wheel /tmp/ms/wheel --out tests/golden/moonshine
"""

from __future__ import annotations

import argparse
import json
import math
import wave
from pathlib import Path

import numpy as np

VOCAB = 512  # pieces kept of the real tokenizer
CLIP_SECONDS = 2.0
SAMPLE_RATE = 16000
TOKENS_PER_SECOND = 6.5  # Moonshine's bound on tokens per second of audio (models/moonshine/model.py)
FIRST_SEED = 0
MIN_DISTINCT = 6  # distinct greedy tokens a seed's model must produce (random models tend to repeat one token)


def trimmed_tokenizer(source: Path, vocab: int) -> dict:
    """The real tokenizer.json cut to ids < vocab: merges kept where both parts and the result survive."""
    t = json.loads(source.read_text())
    kept = {piece: i for piece, i in t["model"]["vocab"].items() if i < vocab}
    merges = []
    for merge in t["model"]["merges"]:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        if left in kept and right in kept and left + right in kept:
            merges.append(merge)
    t["model"]["vocab"] = kept
    t["model"]["merges"] = merges
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < 3]
    return t


def read_clip(path: Path, seconds: float) -> np.ndarray:
    """int16 samples of the first `seconds` of a 16-bit mono 16 kHz wav."""
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, SAMPLE_RATE)
        return np.frombuffer(w.readframes(int(seconds * SAMPLE_RATE)), np.int16).copy()


def random_model(config, seed: int):
    """The model with seeded weights: matrices N(0, 0.2^2), LayerNorm weights 1 +- 0.2, biases N(0, 0.1^2)."""
    import torch
    from transformers import MoonshineForConditionalGeneration

    torch.manual_seed(seed)
    model = MoonshineForConditionalGeneration(config).eval()
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "norm" in name:
                p.copy_(1 + 0.2 * (2 * torch.rand_like(p) - 1))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return model


def main() -> None:
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import MoonshineConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True, help="useful-moonshine-onnx unpacked")
    parser.add_argument("--out", type=Path, default=Path("tests/golden/moonshine"))
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    assets = args.wheel / "moonshine_onnx" / "assets"

    (out / "tokenizer.json").write_text(json.dumps(trimmed_tokenizer(assets / "tokenizer.json", VOCAB)))
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()

    pcm = read_clip(assets / "beckett.wav", CLIP_SECONDS)
    with wave.open(str(out / "clip.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())
    audio = pcm.astype(np.float32) / 32768.0

    config = MoonshineConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=2, decoder_num_attention_heads=2,
        max_position_embeddings=64, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.9})
    x = torch.from_numpy(audio)[None]
    max_tokens = min(math.ceil(audio.size / SAMPLE_RATE * TOKENS_PER_SECOND), config.max_position_embeddings - 1)
    for seed in range(FIRST_SEED, FIRST_SEED + 100):
        model = random_model(config, seed)
        with torch.no_grad():
            generated = model.generate(x, max_new_tokens=max_tokens, do_sample=False, num_beams=1)[0]
        if len(set(generated[1:].tolist())) >= MIN_DISTINCT:
            break
    else:
        raise SystemExit(f"no seed gave {MIN_DISTINCT} distinct greedy tokens")
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "proj_out.weight"}  # tied head
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)

    with torch.no_grad():
        encoder = model.model.encoder(x).last_hidden_state[0]
        logits0 = model(input_values=x, decoder_input_ids=torch.tensor([[1]])).logits[0, -1]
    tokens = generated[1:].numpy().astype(np.int32)  # without the start token
    np.savez(out / "golden.npz", encoder=encoder.numpy().astype(np.float32), tokens=tokens,
             logits0=logits0.numpy().astype(np.float32))
    print(f"seed {seed}, encoder {tuple(encoder.shape)}, {len(tokens)} tokens: {tokens.tolist()} "
          f"{tok.decode(tokens.tolist(), skip_special_tokens=True)!r}")


if __name__ == "__main__":
    main()
