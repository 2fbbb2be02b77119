"""Golden references for Kokoro parity: upstream `kokoro` (PyTorch, CPU) on the weights of our converted GGUF.

Run with the reference venv (torch, kokoro, phonemizer, espeakng-loader, gguf):

    /work/refvenv/bin/python scripts/make_kokoro_golden.py [--gguf PATH]

Writes tests/golden/kokoro/:
- parity.json: per sentence the text, its espeak (en-us) phonemes, the ids (our vocabulary; unknown symbols
  dropped as KModel.forward drops them), voice, speed, noise mode and seed, and the reference durations;
- parity_audio.npz: the reference audio of each sentence (float16: its rounding is ~-70 dB, far below the bound);
- tiny_state.pth, tiny_voice.pt: small torch.save fixtures for the restricted unpickler (weight_g/weight_v,
  a Parameter, an fp16 and a bf16 tensor, a non-contiguous view, `module.` prefixes).

Noise: SineGen's Gaussian noise is replaced by models/kokoro/noise.source_noise(seed) (the GPU's generator) or
by zeros ("off"); its random initial phase by zeros (it lands on sample 0, which the linear downsampling never
reads). The weights: every `k.*` tensor of the GGUF as float32, written into KModel after removing weight_norm,
so both sides run the very same numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "golden" / "kokoro"

SENTENCES = [  # (text, voice, speed, noise, seed): parity runs with the source noise seeded on both sides;
    # "off" cases show the reference's ill-conditioning (see tests/models/test_kokoro_parity.py)
    ("Hello world.", "jf_alpha", 1.0, "seeded", 7),
    ("The quick brown fox jumps over the lazy dog.", "jf_alpha", 1.0, "seeded", 1),
    ("Hearth speaks through hand-written shaders.", "jm_kumo", 1.0, "seeded", 2),
    ("Is it raining in London today?", "jf_nezumi", 1.0, "seeded", 3),
    ("Numbers like three hundred and twelve are spelled out.", "jf_gongitsune", 1.0, "seeded", 4),
    ("She sells sea shells by the sea shore.", "jf_tebukuro", 1.2, "seeded", 5),
    ("Please leave a message after the tone.", "jm_kumo", 0.9, "seeded", 6),
    ("A bird in the hand is worth two in the bush.", "jf_alpha", 1.0, "seeded", 8),
    ("Good morning, everyone!", "jf_nezumi", 1.0, "seeded", 1234),
    ("Time flies like an arrow; fruit flies like a banana.", "jf_gongitsune", 1.0, "seeded", 9),
    ("Hi.", "jm_kumo", 1.0, "seeded", 11),
    ("Hello world.", "jf_alpha", 1.0, "off", 0),
]


def phonemize(texts: list[str]) -> list[str]:
    import espeakng_loader
    from phonemizer.backend import EspeakBackend
    from phonemizer.backend.espeak.wrapper import EspeakWrapper

    EspeakWrapper.set_library(espeakng_loader.get_library_path())
    EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
    backend = EspeakBackend("en-us", preserve_punctuation=True, with_stress=True)
    return [p.strip() for p in backend.phonemize(texts)]


def read_gguf(path: Path) -> tuple[dict[str, np.ndarray], dict, dict[str, int]]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    arrays = {t.name[2:]: np.asarray(t.data).astype(np.float32).reshape([int(s) for s in reversed(t.shape)])
              for t in reader.tensors}
    field = lambda k: bytes(reader.fields[k].parts[-1]).decode("utf-8")  # noqa: E731
    return arrays, json.loads(field("kokoro.config")), json.loads(field("kokoro.vocab"))


def build_reference(arrays: dict[str, np.ndarray], config: dict):
    import torch
    from kokoro.istftnet import Decoder
    from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
    from transformers import AlbertConfig

    plbert = {k: v for k, v in config["plbert"].items() if k != "embedding_size"}
    parts = {
        "bert": CustomAlbert(AlbertConfig(vocab_size=config["n_token"], **plbert)),
        "bert_encoder": torch.nn.Linear(plbert["hidden_size"], config["hidden_dim"]),
        "predictor": ProsodyPredictor(style_dim=config["style_dim"], d_hid=config["hidden_dim"],
                                      nlayers=config["n_layer"], max_dur=config["max_dur"], dropout=config["dropout"]),
        "text_encoder": TextEncoder(channels=config["hidden_dim"], kernel_size=config["text_encoder_kernel_size"],
                                    depth=config["n_layer"], n_symbols=config["n_token"]),
        "decoder": Decoder(dim_in=config["hidden_dim"], style_dim=config["style_dim"], dim_out=config["n_mels"],
                           **config["istftnet"]),
    }
    for module in parts.values():
        for sub in module.modules():
            if hasattr(sub, "weight_g"):
                torch.nn.utils.remove_weight_norm(sub)
    layer = "bert.encoder.albert_layer_groups.0.albert_layers.0."
    for name, module in parts.items():
        state = module.state_dict()
        loaded = set()
        for key in state:
            ours = f"{name}.{key}"
            if ours.startswith(layer):
                ours = "bert.layer." + ours[len(layer):]
            if ours in arrays:
                state[key] = torch.from_numpy(arrays[ours].reshape(state[key].shape).copy())
                loaded.add(key)
        skipped = [k for k in state if k not in loaded]
        assert all("pooler" in k or ".norm." in k or "position_ids" in k for k in skipped), skipped
        module.load_state_dict(state)
        module.eval()
    return parts


def forward(parts: dict, ids: list[int], ref_s, speed: float):
    """KModel.forward_with_tokens on the parts (same code path, batch of one)."""
    import torch

    input_ids = torch.LongTensor([[0, *ids, 0]])
    lengths = torch.full((1,), input_ids.shape[-1], dtype=torch.long)
    text_mask = torch.arange(lengths.max()).unsqueeze(0).expand(1, -1).type_as(lengths)
    text_mask = torch.gt(text_mask + 1, lengths.unsqueeze(1))
    bert_dur = parts["bert"](input_ids, attention_mask=(~text_mask).int())
    d_en = parts["bert_encoder"](bert_dur).transpose(-1, -2)
    s = ref_s[:, 128:]
    d = parts["predictor"].text_encoder(d_en, s, lengths, text_mask)
    x, _ = parts["predictor"].lstm(d)
    duration = torch.sigmoid(parts["predictor"].duration_proj(x)).sum(axis=-1) / speed
    pred_dur = torch.round(duration).clamp(min=1).long().squeeze()
    indices = torch.repeat_interleave(torch.arange(input_ids.shape[1]), pred_dur)
    aln = torch.zeros((input_ids.shape[1], indices.shape[0]))
    aln[indices, torch.arange(indices.shape[0])] = 1
    aln = aln.unsqueeze(0)
    en = d.transpose(-1, -2) @ aln
    f0, n = parts["predictor"].F0Ntrain(en, s)
    t_en = parts["text_encoder"](input_ids, lengths, text_mask)
    audio = parts["decoder"](t_en @ aln, f0, n, ref_s[:, :128]).squeeze()
    return audio.numpy(), pred_dur.numpy()


def patched_noise(mode: str, seed: int):
    """A context that feeds SineGen our noise (or none) instead of torch's RNG."""
    import contextlib

    import torch

    from models.kokoro.noise import source_noise

    real_randn_like, real_rand = torch.randn_like, torch.rand

    def randn_like(t, *a, **k):
        if t.dim() == 3 and t.shape[-1] == 9 and mode == "seeded":
            return torch.from_numpy(source_noise(seed, t.shape[1])).reshape(t.shape)
        return torch.zeros_like(t)

    @contextlib.contextmanager
    def ctx():
        torch.randn_like, torch.rand = randn_like, (lambda *s, **k: torch.zeros(*s))
        try:
            yield
        finally:
            torch.randn_like, torch.rand = real_randn_like, real_rand

    return ctx()


def write_fixtures() -> None:
    import torch

    g = torch.nn.utils.weight_norm(torch.nn.Conv1d(3, 2, 3))
    torch.manual_seed(0)
    state = OrderedDict((f"module.{k}", v.detach().clone()) for k, v in g.state_dict().items())
    extra = OrderedDict(w=torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3)),
                        h=torch.tensor([1.5, -2.0], dtype=torch.float16),
                        b=torch.tensor([0.25, 3.0], dtype=torch.bfloat16),
                        t=torch.arange(12, dtype=torch.float32).reshape(3, 4).t())
    torch.save({"decoder": state, "bert_encoder": extra}, OUT / "tiny_state.pth")
    torch.save(torch.linspace(-1, 1, 4 * 256).reshape(4, 1, 256), OUT / "tiny_voice.pt")
    folded = (g.weight_g * g.weight_v / g.weight_v.norm(dim=(1, 2), keepdim=True)).detach().numpy()
    np.savez(OUT / "tiny_state_expected.npz", conv_weight=folded, conv_bias=g.bias.detach().numpy())


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, help="our converted Kokoro GGUF (default: the cached shipped model)")
    args = parser.parse_args()
    if args.gguf is None:
        from models.kokoro.convert import converted_model_path

        args.gguf = converted_model_path("kokoro")
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    arrays, config, vocab = read_gguf(args.gguf)
    parts = build_reference(arrays, config)
    phonemes = phonemize([s[0] for s in SENTENCES])
    records, audio = [], {}
    for i, ((text, voice, speed, noise, seed), ps) in enumerate(zip(SENTENCES, phonemes)):
        ids = [vocab[ch] for ch in ps if ch in vocab]
        pack = arrays[f"voice.{voice}"]
        ref_s = torch.from_numpy(pack[len(ids) - 1].reshape(1, -1).copy())
        with torch.no_grad(), patched_noise(noise, seed):
            wav, dur = forward(parts, ids, ref_s, speed)
        records.append(dict(text=text, phonemes=ps, ids=ids, voice=voice, speed=speed, noise=noise, seed=seed,
                            durations=[int(v) for v in np.atleast_1d(dur)], samples=int(wav.size)))
        audio[f"s{i}"] = wav.astype(np.float16)
        print(f"{i}: {len(ids)} ids, {int(np.sum(dur))} frames, {wav.size / 24000:.2f} s  {ps}")
    (OUT / "parity.json").write_text(json.dumps({"gguf": args.gguf.name, "sentences": records}, indent=1,
                                                ensure_ascii=False) + "\n", encoding="utf-8")
    np.savez_compressed(OUT / "parity_audio.npz", **audio)
    write_fixtures()


if __name__ == "__main__":
    main()
