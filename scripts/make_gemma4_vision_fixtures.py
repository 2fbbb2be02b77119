r"""Fixtures for Gemma 4's image encoder (issue 42): a tiny random-weight Gemma4ForConditionalGeneration (no audio
tower) whose vision tower and projector llama.cpp's own convert_hf_to_gguf.py writes to a projector GGUF
(`--mmproj`, projector type "gemma4v"), with transformers' float32 image features on exactly those weights and the
reference image processor's pixels for the photos in tests/golden/vision/photos.

The model is the real architecture shrunk (HF configs in gemma4_meta.json):
- vision: Gemma4VisionModel at hidden 64, 4 heads of 16 (the real 768 = 12 x 64), 2 layers, intermediate 176, patch
  16 and pooling 3 as the real one, a position table of 64 entries per axis (the real 10240; 64 covers every grid
  here), rope theta 100 (the real default); no clipped linears, no standardisation (the real defaults);
- the processor keeps 70 soft tokens at most (max_soft_tokens, the smallest the processor accepts; the real default
  is 280), so an image becomes at most 630 patches and a variable number of soft tokens (as many 3 x 3 blocks as its
  aspect-preserving resize holds);
- text: a two-layer Gemma 4 text config of hidden 128 (only its hidden size, the projector's output width, matters
  to the projector file).
Weights: seeded (SEED), vision matrices and the position table N(0, 0.1^2) (text ones 0.02), norm weights 1 +- 0.2
(Gemma 4's RMSNorms multiply by w as stored).

Outputs in --out (tests/golden/vision):
- mmproj-gemma4_tiny.f32.gguf; mmproj-gemma4_clipped_tiny.f32.gguf: the same weights with use_clipped_linears and
  bounds that bind (set_bounds), the converter writing them as `<weight>.input_min` ... scalars;
- gemma4_golden.npz: pixels/<photo>: uint8 [P, 3 p p] Gemma4ImageProcessorPil's pixel_values without the padding
  rows, times 255 (they are u8 / 255, checked to 1e-6); positions/<photo>: int32 [P, 2] its image_position_ids
  (x, y) likewise; features/<photo>: float32 [T, 128] (get_image_features, one image at a time) for FEATURE_PHOTOS;
  clipped/features/<CLIPPED_PHOTO>: the clipped model's;
- gemma4_meta.json: configs, seed, soft tokens per photo, sha256 of each file.

Run (well under a minute; torch CPU, transformers 5.24, Pillow):

    /work/refvenv/bin/python scripts/make_gemma4_vision_fixtures.py --out tests/golden/vision
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_vision_fixtures import CONVERTER_VERSION, DEFAULT_LLAMA_CPP, convert, file_sha256, photo_names  # noqa: E402

NAME = "gemma4_tiny"
SEED = 4400
MAX_SOFT_TOKENS = 70
FEATURE_PHOTOS = ("china.jpg", "flower_tall.png")
CLIPPED_NAME = "gemma4_clipped_tiny"
CLIPPED_PHOTO = "flower_tall.png"
TEXT_CONFIG = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=32,
                   num_hidden_layers=2, intermediate_size=192, vocab_size=512, vocab_size_per_layer_input=512,
                   hidden_size_per_layer_input=0, layer_types=["sliding_attention", "full_attention"],
                   sliding_window=512, max_position_embeddings=1024)
VISION_CONFIG = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, head_dim=16, patch_size=16, pooling_kernel_size=3,
                     position_embedding_size=64, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")
PROCESSOR = dict(patch_size=16, pooling_kernel_size=3, max_soft_tokens=MAX_SOFT_TOKENS)


def build_model(seed: int, clipped: bool = False):  # noqa: ANN201 (torch is not imported at module level)
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    vision = dict(VISION_CONFIG, use_clipped_linears=clipped)
    config = Gemma4Config(text_config=TEXT_CONFIG, vision_config=vision, audio_config=None,
                          attn_implementation="eager")
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * (2 * torch.rand_like(p) - 1))
            elif p.ndim >= 2:
                p.normal_(0, 0.1 if "vision" in name or "embed_vision" in name else 0.02)
            else:
                p.normal_(0, 0.1)
        if clipped:
            set_bounds(model)
    return model


def set_bounds(model) -> None:  # noqa: ANN001
    """Bounds that bind (about a tenth of the values clipped), different per matrix; the value projections keep the
    default infinite ones, as a checkpoint may."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ClippableLinear

    for j, (name, module) in enumerate(m for m in model.named_modules() if isinstance(m[1], Gemma4ClippableLinear)):
        if name.endswith("v_proj"):
            continue
        module.input_min.fill_(-1.2 - 0.05 * j)
        module.input_max.fill_(1.1 + 0.05 * j)
        if not name.endswith("up_proj"):  # the up projections: input bounds only
            module.output_min.fill_(-0.9 - 0.03 * j)
            module.output_max.fill_(1.0 + 0.03 * j)


def reference(photos: Path, model) -> tuple[dict[str, np.ndarray], dict[str, int]]:  # noqa: ANN001
    import torch
    from PIL import Image
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    processor = Gemma4ImageProcessorPil(**PROCESSOR)
    out: dict[str, np.ndarray] = {}
    tokens: dict[str, int] = {}
    for name in photo_names(photos):
        got = processor(images=Image.open(photos / name), return_tensors="pt")
        positions = got["image_position_ids"][0]
        valid = (positions != -1).all(-1)
        values = got["pixel_values"][0][valid].numpy().astype(np.float32)
        u8 = np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)
        err = float(np.abs(u8.astype(np.float32) * np.float32(1 / 255) - values).max())
        assert err < 1e-6, f"{name}: pixel values off the uint8 grid by {err}"
        out[f"pixels/{name}"] = u8
        out[f"positions/{name}"] = positions[valid].numpy().astype(np.int32)
        tokens[name] = int(got["num_soft_tokens_per_image"][0])
        if name in FEATURE_PHOTOS:
            with torch.no_grad():
                feats = model.model.get_image_features(got["pixel_values"], got["image_position_ids"],
                                                       return_dict=True).pooler_output
            out[f"features/{name}"] = torch.cat(feats).float().numpy()
            assert out[f"features/{name}"].shape[0] == tokens[name], (name, out[f"features/{name}"].shape)
        print(f"{name}: {tokens[name]} soft tokens, {int(valid.sum())} patches", flush=True)
    return out, tokens


def features(path: Path, model) -> np.ndarray:  # noqa: ANN001
    import torch
    from PIL import Image
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    got = Gemma4ImageProcessorPil(**PROCESSOR)(images=Image.open(path), return_tensors="pt")
    with torch.no_grad():
        feats = model.model.get_image_features(got["pixel_values"], got["image_position_ids"],
                                               return_dict=True).pooler_output
    return torch.cat(feats).float().numpy()


def write_mmproj(model, path: Path, llama_cpp: Path) -> None:  # noqa: ANN001
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / path.stem
        model.save_pretrained(hf_dir, safe_serialization=True)
        Gemma4ImageProcessorPil(**PROCESSOR).save_pretrained(hf_dir)  # the converter reads its mean and std
        convert(llama_cpp, hf_dir, path, "f32", True, Path(tempfile.gettempdir()) / f"{path.stem}.convert.log")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/golden/vision"))
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP)
    args = ap.parse_args()
    model = build_model(SEED)
    golden, tokens = reference(args.out / "photos", model)
    clipped = build_model(SEED, clipped=True)
    golden[f"clipped/features/{CLIPPED_PHOTO}"] = features(args.out / "photos" / CLIPPED_PHOTO, clipped)
    mmproj = args.out / f"mmproj-{NAME}.f32.gguf"
    mmproj_clipped = args.out / f"mmproj-{CLIPPED_NAME}.f32.gguf"
    for m, path in ((model, mmproj), (clipped, mmproj_clipped)):
        write_mmproj(m, path, args.llama_cpp)
    np.savez_compressed(args.out / "gemma4_golden.npz", **golden)
    meta = {"name": NAME, "seed": SEED, "converter": CONVERTER_VERSION, "text_config": TEXT_CONFIG,
            "vision_config": VISION_CONFIG, "processor": PROCESSOR, "feature_photos": list(FEATURE_PHOTOS),
            "soft_tokens": tokens,
            "clipped_photo": CLIPPED_PHOTO,
            "sha256": {p.name: file_sha256(p) for p in (mmproj, mmproj_clipped, args.out / "gemma4_golden.npz")}}
    (args.out / "gemma4_meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
