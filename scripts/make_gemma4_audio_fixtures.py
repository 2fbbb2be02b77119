r"""Fixtures for Gemma 4's audio encoder (issue 42): a tiny random-weight Gemma4ForConditionalGeneration with an
audio tower, whose audio (and vision) towers llama.cpp's own convert_hf_to_gguf.py writes to a projector GGUF
(`--mmproj`, audio projector type "gemma4a"), with transformers' float32 audio features and projected audio
embeddings on exactly those weights, for a real speech clip.

The model is the real architecture shrunk (HF configs in meta.json):
- audio: Gemma4AudioModel at hidden 32, 4 heads of 8, 2 conformer layers, subsampling channels (128, 8) (the first
  must stay 128: the model flattens 128 / 4 frequency rows times the second's channels), conv kernel 5, chunk 12,
  left context 13, right 0, logit cap 50 (the real values), output 64; clipped linears on, with bounds that bind
  (set_bounds) so the converter's `.input_min` ... scalars are exercised;
- vision: the smallest Gemma4VisionModel (hidden 16, one layer); the converter needs a vision tower to write the
  file, the audio tests ignore it;
- text: a two-layer Gemma 4 text config of hidden 128 (only its hidden size, the audio projector's output width,
  matters to the projector file).
Weights: seeded (SEED), audio matrices N(0, 0.1^2), other 1-D parameters N(0, 0.1^2), norm weights 1 +- 0.2.

The clip: the first CLIP_SECONDS of tests/golden/whisper/clips/00.ogg decoded by audio.decode (16 kHz mono).

Outputs in --out (tests/golden/gemma4_audio):
- mmproj-gemma4_audio_tiny.f32.gguf;
- golden.npz: samples float32 [n] (the decoded clip); features float32 [frames, 128] (transformers'
  Gemma4AudioFeatureExtractor, the rows its mask keeps); embeddings float32 [tokens, 128] (get_audio_features'
  pooler_output: the audio tower and the embed_audio projection); tower float32 [tokens, 64] (the tower's output
  before the projection); short/features, short/embeddings: the same for the first SHORT_SAMPLES samples;
- meta.json: configs, seed, clip, token count, sha256 of each file.

Run (under a minute; torch CPU, transformers 5.24, PyAV; from the repository root):

    /work/refvenv/bin/python scripts/make_gemma4_audio_fixtures.py --out tests/golden/gemma4_audio
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]

from make_vision_fixtures import CONVERTER_VERSION, DEFAULT_LLAMA_CPP, convert, file_sha256  # noqa: E402

NAME = "gemma4_audio_tiny"
SEED = 4420
CLIP = "tests/golden/whisper/clips/00.ogg"
CLIP_SECONDS = 2.0
# A prefix of an even number of frames (98): the first convolution's row 49 then sees a real frame, and transformers
# zeroes it (its mask) before the second convolution reads it for the last soft token.
SHORT_SAMPLES = 15700
TEXT_CONFIG = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=32,
                   num_hidden_layers=2, intermediate_size=192, vocab_size=512, vocab_size_per_layer_input=512,
                   hidden_size_per_layer_input=0, layer_types=["sliding_attention", "full_attention"],
                   sliding_window=512, max_position_embeddings=1024)
VISION_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=2, head_dim=8, patch_size=16, pooling_kernel_size=3,
                     position_embedding_size=8, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")
AUDIO_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, hidden_act="silu",
                    subsampling_conv_channels=[128, 8], conv_kernel_size=5, residual_weight=0.5,
                    attention_chunk_size=12, attention_context_left=13, attention_context_right=0,
                    attention_logit_cap=50.0, use_clipped_linears=True, rms_norm_eps=1e-6, output_proj_dims=64)


def build_model(seed: int):  # noqa: ANN201 (torch is not imported at module level)
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    config = Gemma4Config(text_config=TEXT_CONFIG, vision_config=VISION_CONFIG, audio_config=AUDIO_CONFIG,
                          attn_implementation="eager")
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * (2 * torch.rand_like(p) - 1))
            elif p.ndim >= 2:
                p.normal_(0, 0.1 if "audio" in name or "vision" in name else 0.02)
            else:
                p.normal_(0, 0.1)
        set_bounds(model)
    return model


def set_bounds(model) -> None:  # noqa: ANN001
    """Bounds on the audio tower's clippable linears that bind for some values, different per matrix; the value
    projections keep the default infinite ones, as a checkpoint may."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ClippableLinear

    clippable = [(n, m) for n, m in model.named_modules() if isinstance(m, Gemma4ClippableLinear) and "audio" in n]
    for j, (name, module) in enumerate(clippable):
        if name.endswith("v_proj"):
            continue
        module.input_min.fill_(-2.0 - 0.05 * j)
        module.input_max.fill_(1.8 + 0.05 * j)
        module.output_min.fill_(-1.5 - 0.03 * j)
        module.output_max.fill_(1.6 + 0.03 * j)


def decode_clip() -> np.ndarray:
    from audio.decode import decode_audio

    samples = decode_audio((ROOT / CLIP).read_bytes())
    return np.ascontiguousarray(samples[: int(CLIP_SECONDS * 16000)], dtype=np.float32)


def reference(model, samples: np.ndarray) -> dict[str, np.ndarray]:  # noqa: ANN001
    import torch
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    got = Gemma4AudioFeatureExtractor()([samples], return_tensors="pt")
    mask = got["input_features_mask"]
    with torch.no_grad():
        out = model.model.get_audio_features(got["input_features"], mask, return_dict=True)
    keep = out.attention_mask[0]
    return {"samples": samples, "features": got["input_features"][0][mask[0]].numpy().astype(np.float32),
            "embeddings": out.pooler_output[0][keep].float().numpy(),
            "tower": out.last_hidden_state[0][keep].float().numpy()}


def write_mmproj(model, path: Path, llama_cpp: Path) -> None:  # noqa: ANN001
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / path.stem
        model.save_pretrained(hf_dir, safe_serialization=True)
        # Both write preprocessor_config.json; the converter reads the image processor's mean and std from it and
        # nothing from the feature extractor (whose settings the file does not carry), so the image one goes last.
        Gemma4AudioFeatureExtractor().save_pretrained(hf_dir)
        Gemma4ImageProcessorPil(patch_size=16, pooling_kernel_size=3).save_pretrained(hf_dir)
        convert(llama_cpp, hf_dir, path, "f32", True, Path(tempfile.gettempdir()) / f"{path.stem}.convert.log")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/golden/gemma4_audio"))
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(SEED)
    samples = decode_clip()
    golden = reference(model, samples)
    short = reference(model, samples[:SHORT_SAMPLES])
    golden.update({f"short/{k}": short[k] for k in ("features", "embeddings")})
    mmproj = args.out / f"mmproj-{NAME}.f32.gguf"
    write_mmproj(model, mmproj, args.llama_cpp)
    np.savez_compressed(args.out / "golden.npz", **golden)
    meta = {"name": NAME, "seed": SEED, "converter": CONVERTER_VERSION, "clip": CLIP, "clip_seconds": CLIP_SECONDS,
            "text_config": TEXT_CONFIG, "vision_config": VISION_CONFIG, "audio_config": AUDIO_CONFIG,
            "frames": int(golden["features"].shape[0]), "tokens": int(golden["embeddings"].shape[0]),
            "sha256": {p.name: file_sha256(p) for p in (mmproj, args.out / "golden.npz")}}
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{meta['frames']} frames, {meta['tokens']} tokens")


if __name__ == "__main__":
    main()
