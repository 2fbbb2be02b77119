r"""Fixtures for Gemma 3's image input (issue 42): a tiny random-weight Gemma3ForConditionalGeneration converted by
llama.cpp's own convert_hf_to_gguf.py to a text GGUF and a projector GGUF (`--mmproj`), with transformers' float32
outputs on exactly the weights the files hold, and the reference image processors' pixels for a few real photos.

The model is the real architecture shrunk (HF configs in meta.json):
- vision: SigLIP at image_size 224, patch 14 (16 x 16 = 256 patches; the real 896 / 14 = 64 x 64), hidden 64, 4 heads,
  2 layers, intermediate 176 (a multiple of 16 but not of 32, as the real 4304); mm_tokens_per_image 16, so the
  projector pools 4 x 4 patches into a token, as the real model does (the converter then writes no scale factor:
  the default, 4, holds);
- text: Gemma 3 at hidden 128, 4 heads, 2 KV heads, head_dim 32, 2 layers, sliding window 512 (longer than every
  prompt here: the window never binds, so the golden does not depend on how a sliding window meets the image's
  bidirectional block);
- tokenizer: SentencePiece BPE with byte fallback in Gemma's layout (scripts/family_fixtures: <pad> 0 <eos> 1 <bos> 2
  <unk> 3, controls to 105, <start_of_turn> 106, <end_of_turn> 107), then <start_of_image> 108 and <end_of_image> 109
  as user-defined pieces (255999 and 256000 in the real vocabulary) and <image_soft_token> 448 as an added special
  token after the model's 448 pieces (262144 in the real one, likewise the first id past the SentencePiece model);
  vocab_size 456 (the real config pads too: 262208). The chat template is Gemma 3's; the processor's expansion of an
  image ("\n\n<start_of_image>" + 16 x <image_soft_token> + "<end_of_image>\n\n") is done here as Gemma3Processor
  does it.
Weights: seeded, matrices N(0, 0.2^2) (vision 0.1; text embeddings 0.02: Gemma scales them by sqrt(hidden) and ties
the head, so larger ones make greedy echo its input), norm weights 1 +- 0.2 (Gemma's (1 + w) norms store w, the
converter bakes in the 1; the projector's soft-embedding norm is one of those; the text model's final norm 4 x that),
biases N(0, 0.1^2). The first seed from 4200 whose greedy run has top-2 margins > 1e-3 and >= 8 distinct tokens.

Outputs in --out (tests/golden/vision):
- gemma3_tiny.f32.gguf (text), mmproj-gemma3_tiny.f32.gguf and mmproj-gemma3_tiny.f16.gguf (the converter's default
  type for projectors: F16 matrices, F32 embeddings and norms);
- photos/*: small real photos (scikit-learn's china.jpg and flower.jpg, CC BY 2.0, re-encoded; photos/README.md);
- golden.npz:
  pixels/<photo>/pil: uint8 [3, 224, 224], the resized image behind Gemma3ImageProcessorPil's pixel_values, which are
  (u8 / 255 - 0.5) / 0.5 (checked to 1e-6); pixels/<photo>/torchvision_minus_pil: int8, the same for
  Gemma3ImageProcessor (the torchvision backend, transformers' default) less the former; image_mean / image_std;
  features/images: names of the encoded photos; features/f32, features/f16: float32 [N, 16, 128] projected image
  embeddings (get_image_features) on the weights of each projector file (F16 matrices rounded as the file holds them);
  prompt/text (rendered chat), prompt/expanded, prompt/ids int32 [T], prompt/token_type_ids int32 [T] (1 on the soft
  tokens), prompt/image (the photo), prompt/greedy int32 [32], prompt/logits float32 [33, V] (row 0 after the prompt,
  row k after greedy token k; prompt/min_top2_margin, the smallest top-two gap on the way; a full forward per step
  with token_type_ids, so transformers applies its bidirectional
  mask over the image's rows);
- meta.json: configs, seeds, ids of the special tokens, sha256 of each file.

Run (about a minute; torch CPU, torchvision, transformers 5.24, sentencepiece, Pillow):

    /work/refvenv/bin/python scripts/make_vision_fixtures.py --out tests/golden/vision \
        --photos /tmp/skl/sklearn/datasets/images

--photos is the folder holding scikit-learn's sample images (`pip download --no-deps scikit-learn`, unzip
sklearn/datasets/images); without it the photos already in --out/photos are used. The converter is llama.cpp's as
vendored in the llama-cpp-python 0.3.36 sdist, run in a subprocess with its own gguf-py (as
scripts/make_family_fixtures.py does).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from family_fixtures.specs import GEMMA_CONTROLS, GEMMA_TURNS  # noqa: E402
from family_fixtures.tokenizers_tiny import CORPUS  # noqa: E402

DEFAULT_LLAMA_CPP = Path("/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp")
CONVERTER_VERSION = "llama.cpp convert_hf_to_gguf.py from llama-cpp-python 0.3.36 (vendored gguf-py 0.19.0)"
NAME = "gemma3_tiny"
SEED = 4200
MAX_SEED_TRIES = 40
MIN_MARGIN = 1e-3  # top-2 logit gap at every recorded step
MIN_DISTINCT = 8  # distinct tokens in the greedy run of 32
N_GREEDY = 32
SPM_SIZE = 448
IMAGE_MARKERS = ["<start_of_image>", "<end_of_image>"]  # user-defined pieces 108, 109
SOFT_TOKEN = "<image_soft_token>"  # added special token 448
VOCAB_SIZE = 456
TOKENS_PER_IMAGE = 16
IMAGE_SIZE = 224
FEATURE_PHOTOS = ("china.jpg", "flower_tall.png")
PROMPT_PHOTO = "china.jpg"
USER_TEXT = "Describe this image in one sentence."

# Gemma 3's chat template as its repositories ship it (google/gemma-3-*-it tokenizer_config.json)
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

TEXT_CONFIG = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=2,
                   intermediate_size=192, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=512,
                   query_pre_attn_scalar=32, hidden_activation="gelu_pytorch_tanh",
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
VISION_CONFIG = dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                     num_attention_heads=4, image_size=IMAGE_SIZE, patch_size=14, layer_norm_eps=1e-6,
                     vision_use_head=False, hidden_act="gelu_pytorch_tanh")
PREPROCESSOR = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
                "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                "image_processor_type": "Gemma3ImageProcessor", "image_seq_length": TOKENS_PER_IMAGE,
                "processor_class": "Gemma3Processor", "resample": 2, "rescale_factor": 1 / 255,
                "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}}


# ---------------------------------------------------------------------------------------------------------------
# Photos
# ---------------------------------------------------------------------------------------------------------------

PHOTOS_README = """# Test photos

Derived from scikit-learn's sample images (sklearn/datasets/images), downscaled, cropped and re-encoded by
scripts/make_vision_fixtures.py:

- china.jpg, china_small.webp, china_rgba.png: "china.jpg", released under a Creative Commons license
  (https://creativecommons.org/licenses/by/2.0/), some rights reserved by danielbuechele
  (https://www.flickr.com/photos/danielbuechele/6061409035/), retrieved by Robert Layton for scikit-learn.
- flower_tall.png, flower_palette.png: "flower.jpg", released under a Creative Commons license
  (https://creativecommons.org/licenses/by/2.0/), some rights reserved (https://www.flickr.com/photos/vultilion/6056698931/),
  retrieved by Robert Layton for scikit-learn.

china_rgba.png has an alpha ramp (transparent on the left) and flower_palette.png is a 64-colour palette image with
one transparent colour: the processors composite both onto white before resizing.
"""


def make_photos(src: Path, out: Path) -> None:
    """Writes the test photos (several sizes, formats and modes) from scikit-learn's two sample JPEGs."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    china = Image.open(src / "china.jpg").convert("RGB")  # 640 x 427
    flower = Image.open(src / "flower.jpg").convert("RGB")
    china.resize((320, 214), Image.LANCZOS).save(out / "china.jpg", quality=85)
    china.crop((100, 50, 500, 350)).resize((150, 113), Image.LANCZOS).save(out / "china_small.webp", quality=80)
    rgba = china.crop((200, 100, 440, 280)).resize((120, 90), Image.LANCZOS).convert("RGBA")
    alpha = np.tile(np.linspace(0, 255, 120).astype(np.uint8), (90, 1))
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(out / "china_rgba.png", optimize=True)
    flower.crop((150, 0, 450, 427)).resize((98, 140), Image.LANCZOS).save(out / "flower_tall.png", optimize=True)
    palette = flower.resize((160, 107), Image.LANCZOS).quantize(64)
    palette.info["transparency"] = 0
    palette.save(out / "flower_palette.png", optimize=True, transparency=0)
    (out / "README.md").write_text(PHOTOS_README)


def photo_names(photos: Path) -> list[str]:
    return sorted(p.name for p in photos.iterdir() if p.suffix in (".jpg", ".png", ".webp"))


def reference_pixels(photos: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The resized uint8 images behind each reference processor's pixel_values (see the docstring's npz keys), and
    Gemma3ImageProcessorPil's pixel_values per photo."""
    from PIL import Image
    from transformers.models.gemma3.image_processing_gemma3 import Gemma3ImageProcessor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    kwargs = {k: PREPROCESSOR[k] for k in ("image_mean", "image_std", "resample", "rescale_factor", "size")}
    processors = {"pil": Gemma3ImageProcessorPil(**kwargs), "torchvision": Gemma3ImageProcessor(**kwargs)}
    out: dict[str, np.ndarray] = {}
    pixels: dict[str, Any] = {}
    for name in photo_names(photos):
        image = Image.open(photos / name)
        resized = {}
        for kind, processor in processors.items():
            values = np.asarray(processor(images=image, return_tensors="np")["pixel_values"][0], np.float32)
            u8 = np.clip(np.rint((values * 0.5 + 0.5) * 255), 0, 255).astype(np.uint8)
            err = float(np.abs(to_pixel_values(u8) - values).max())
            assert err < 1e-6, f"{name} ({kind}): pixel values off the uint8 grid by {err}"
            resized[kind] = u8
            if kind == "pil":
                pixels[name] = values
        out[f"pixels/{name}/pil"] = resized["pil"]
        out[f"pixels/{name}/torchvision_minus_pil"] = (resized["torchvision"].astype(np.int16) -
                                                       resized["pil"]).astype(np.int8)
        diff = np.abs(to_pixel_values(resized["pil"]) - to_pixel_values(resized["torchvision"]))
        print(f"{name}: {image.mode} {image.size}, pil vs torchvision max |diff| {diff.max():.4f}, "
              f"{np.count_nonzero(diff)} of {diff.size} values differ", flush=True)
    out["image_mean"] = np.asarray(PREPROCESSOR["image_mean"], np.float32)
    out["image_std"] = np.asarray(PREPROCESSOR["image_std"], np.float32)
    return out, pixels


def to_pixel_values(u8: np.ndarray) -> np.ndarray:
    """The processors' rescale (1/255) and normalise (mean 0.5, std 0.5) of a resized uint8 image, in float32."""
    return ((u8.astype(np.float32) * np.float32(1 / 255)) - np.float32(0.5)) / np.float32(0.5)


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer, model, conversion
# ---------------------------------------------------------------------------------------------------------------

def build_tokenizer(hf_dir: Path) -> Any:
    import sentencepiece as spm
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    buf = io.BytesIO()
    corpus = [line for line in (CORPUS + CHAT_TEMPLATE).splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=buf, model_type="bpe", vocab_size=SPM_SIZE, byte_fallback=True,
        character_coverage=1.0, split_digits=True, add_dummy_prefix=False, remove_extra_whitespaces=False,
        normalization_rule_name="identity", allow_whitespace_only_pieces=False, control_symbols=GEMMA_CONTROLS,
        user_defined_symbols=GEMMA_TURNS + IMAGE_MARKERS, pad_piece="<pad>", unk_piece="<unk>", bos_piece="<bos>",
        eos_piece="<eos>", num_threads=1, minloglevel=2, pad_id=0, eos_id=1, bos_id=2, unk_id=3)
    (hf_dir / "tokenizer.model").write_bytes(buf.getvalue())
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
         "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False, "legacy": False}) + "\n")
    tok = AutoTokenizer.from_pretrained(hf_dir)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA_TURNS + IMAGE_MARKERS + [SOFT_TOKEN]],
                   special_tokens=True)
    ids = tok.convert_tokens_to_ids(GEMMA_TURNS + IMAGE_MARKERS + [SOFT_TOKEN])
    assert ids == [106, 107, 108, 109, SPM_SIZE], ids
    tok.save_pretrained(hf_dir)
    (hf_dir / "tokenizer.model").write_bytes(buf.getvalue())
    decoder = {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                        "single_word": t.single_word, "special": t.special}
               for i, t in sorted(AutoTokenizer.from_pretrained(hf_dir).added_tokens_decoder.items())}
    path = hf_dir / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(added_tokens_decoder=decoder, chat_template=CHAT_TEMPLATE, bos_token="<bos>", eos_token="<eos>",
               pad_token="<pad>", add_bos_token=True, add_eos_token=False, model_max_length=131072,
               tokenizer_class="GemmaTokenizer", boi_token=IMAGE_MARKERS[0], eoi_token=IMAGE_MARKERS[1],
               image_token=SOFT_TOKEN)
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (hf_dir / "chat_template.jinja").unlink(missing_ok=True)
    (hf_dir / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}, indent=2) + "\n")
    (hf_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    return AutoTokenizer.from_pretrained(hf_dir)


def build_model(seed: int) -> Any:
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    config = Gemma3Config(
        text_config=dict(TEXT_CONFIG, vocab_size=VOCAB_SIZE, bos_token_id=2, eos_token_id=[1, 107], pad_token_id=0),
        vision_config=VISION_CONFIG, mm_tokens_per_image=TOKENS_PER_IMAGE, boi_token_index=108, eoi_token_index=109,
        image_token_index=SPM_SIZE, bos_token_id=2, eos_token_id=[1, 107], pad_token_id=0,
        architectures=["Gemma3ForConditionalGeneration"])
    config._attn_implementation = "eager"
    config.text_config._attn_implementation = "eager"
    config.vision_config._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            vision = "vision_tower" in name
            if vision and "norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.2 * noise)  # SigLIP's LayerNorm gamma
            elif "norm" in name and not vision:
                p.copy_(0.2 * noise)  # Gemma3RMSNorm's w (the model computes with 1 + w)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.02 * noise)
            elif vision:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.2 * noise)
        final = model.model.language_model.norm.weight
        final.copy_(4.0 * (1.0 + final) - 1.0)  # 1 + w = 4 (1 +- 0.2): peaked logits, greedy paths decided
    return model


def save_checkpoint(model: Any, hf_dir: Path) -> None:
    """save_pretrained, then the vision tower's weights renamed to the released checkpoints' layout
    (`vision_tower.vision_model.*`, which the converter maps; transformers 5.24 saves `vision_tower.*`); checks that
    transformers loads the renamed checkpoint back to the same weights."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Gemma3ForConditionalGeneration

    model.save_pretrained(hf_dir, safe_serialization=True)
    path = hf_dir / "model.safetensors"
    state = load_file(path)
    renamed = {k.replace("vision_tower.", "vision_tower.vision_model.", 1) if k.startswith("vision_tower.") and
               not k.startswith("vision_tower.vision_model.") else k: v for k, v in state.items()}
    save_file(renamed, path, metadata={"format": "pt"})
    back = Gemma3ForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32)
    mine = dict(model.state_dict())
    for name, value in back.state_dict().items():
        if not torch.equal(value, mine[name]):
            raise ValueError(f"{name} differs after reloading the renamed checkpoint")


def _converter_entry(llama_cpp: Path, args: list[str]) -> None:
    """Runs convert_hf_to_gguf.main() unmodified (the subprocess side)."""
    sys.path[:0] = [str(llama_cpp / "gguf-py"), str(llama_cpp)]
    import convert_hf_to_gguf

    sys.argv = ["convert_hf_to_gguf.py", *args]
    convert_hf_to_gguf.main()


def convert(llama_cpp: Path, hf_dir: Path, out: Path, outtype: str, mmproj: bool, log: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{llama_cpp / 'gguf-py'}{os.pathsep}{llama_cpp}")
    env.pop("NO_LOCAL_GGUF", None)
    cmd = [sys.executable, __file__, "--_convert", str(llama_cpp), str(hf_dir), "--outtype", outtype,
           "--outfile", str(out), *(["--mmproj"] if mmproj else [])]
    with log.open("a") as f:
        done = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"converting {hf_dir.name} to {out.name} failed; see {log}")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rounded_like_file(model: Any, path: Path) -> Any:
    """A copy of the model whose vision and projector weights are rounded as the projector GGUF stores them (its
    F16 tensors through float16); checks that every other tensor of the file is the checkpoint's exactly, with the
    converter's two transforms (the soft-embedding norm's 1 + w, the projector matrix's layout)."""
    import copy

    import gguf
    import torch

    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, VISION_CONFIG["num_hidden_layers"])
    other = copy.deepcopy(model)
    seen = set()
    with torch.no_grad():
        for name, p in other.named_parameters():
            if "language_model" in name:
                continue
            hf = name.replace("model.", "", 1).replace("_weight", ".weight")
            if hf.startswith("vision_tower."):
                hf = hf.replace("vision_tower.", "vision_tower.vision_model.", 1)
            target = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
            if target not in tensors:
                raise KeyError(f"{path.name}: no tensor for {name} ({target})")
            seen.add(target)
            t = tensors[target]
            stored = np.asarray(t.data).astype(np.float32)
            expect = p.detach().numpy()
            if "soft_emb_norm" in name:
                expect = expect + np.float32(1)
            if t.tensor_type == gguf.GGMLQuantizationType.F16:
                expect = expect.astype(np.float16).astype(np.float32)
            if not np.array_equal(stored.reshape(-1), expect.reshape(-1)):
                raise ValueError(f"{path.name}: {target} is not the converter's transform of {name}")
            if t.tensor_type == gguf.GGMLQuantizationType.F16:
                p.copy_(p.half().float())
    missing = set(tensors) - seen
    if missing:
        raise KeyError(f"{path.name}: tensors not matched to the checkpoint: {sorted(missing)}")
    return other


def image_features(model: Any, pixels: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model.get_image_features(torch.from_numpy(pixels))
    return out.pooler_output.float().numpy()


def prompt_golden(model: Any, tok: Any, pixels: np.ndarray) -> dict[str, np.ndarray]:
    """The chat prompt of one user turn (text, then the image), expanded as Gemma3Processor does, and transformers'
    greedy run on it: a full forward per step with token_type_ids (1 on the soft tokens, 0 on the rest)."""
    import torch

    messages = [{"role": "user", "content": [{"type": "text", "text": USER_TEXT}, {"type": "image"}]}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expanded = text.replace(IMAGE_MARKERS[0], f"\n\n{IMAGE_MARKERS[0]}{SOFT_TOKEN * TOKENS_PER_IMAGE}"
                                              f"{IMAGE_MARKERS[1]}\n\n")
    ids = tok.encode(expanded, add_special_tokens=False)
    soft = tok.convert_tokens_to_ids(SOFT_TOKEN)
    assert ids.count(soft) == TOKENS_PER_IMAGE and ids[0] == tok.bos_token_id
    seq = list(ids)
    logits_rows = []
    pv = torch.from_numpy(pixels[None])
    with torch.no_grad():
        for _ in range(N_GREEDY + 1):
            input_ids = torch.tensor([seq])
            types = (input_ids == soft).long()
            out = model(input_ids=input_ids, pixel_values=pv, token_type_ids=types, use_cache=False)
            row = out.logits[0, -1].float().numpy()
            logits_rows.append(row)
            seq.append(int(row.argmax()))
    logits = np.stack(logits_rows)
    top2 = np.sort(logits, axis=1)[:, -2:]
    print(f"prompt: {len(ids)} ids, greedy {seq[len(ids):len(ids) + N_GREEDY]}, min top-2 margin "
          f"{float((top2[:, 1] - top2[:, 0]).min()):.4f}", flush=True)
    return {"prompt/text": np.asarray(text), "prompt/expanded": np.asarray(expanded),
            "prompt/ids": np.asarray(ids, np.int32), "prompt/token_type_ids": np.asarray(
                [int(i == soft) for i in ids], np.int32), "prompt/image": np.asarray(PROMPT_PHOTO),
            "prompt/greedy": np.asarray(seq[len(ids):len(ids) + N_GREEDY], np.int32), "prompt/logits": logits,
            "prompt/min_top2_margin": np.float32((top2[:, 1] - top2[:, 0]).min())}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_convert":
        _converter_entry(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--photos", type=Path, help="scikit-learn's sklearn/datasets/images folder")
    parser.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP, help="llama.cpp source tree")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vision_fixtures"))
    args = parser.parse_args()
    import torch
    import transformers

    torch.manual_seed(0)
    out, work = args.out, args.work
    out.mkdir(parents=True, exist_ok=True)
    hf_dir = work / NAME
    hf_dir.mkdir(parents=True, exist_ok=True)
    if args.photos:
        make_photos(args.photos, out / "photos")
    golden, pixels = reference_pixels(out / "photos")

    tok = build_tokenizer(hf_dir)
    for seed in range(SEED, SEED + MAX_SEED_TRIES):  # the first seed whose greedy run is decided and varied
        model = build_model(seed)
        prompt = prompt_golden(model, tok, pixels[PROMPT_PHOTO])
        if prompt["prompt/min_top2_margin"] > MIN_MARGIN and len(set(prompt["prompt/greedy"].tolist())) >= MIN_DISTINCT:
            break
    else:
        raise RuntimeError(f"no seed in {MAX_SEED_TRIES} tries gives a decided, varied greedy run")
    save_checkpoint(model, hf_dir)
    log = work / "convert.log"
    log.unlink(missing_ok=True)
    files = {"text": out / f"{NAME}.f32.gguf", "f32": out / f"mmproj-{NAME}.f32.gguf",
             "f16": out / f"mmproj-{NAME}.f16.gguf"}
    convert(args.llama_cpp, hf_dir, files["text"], "f32", False, log)
    convert(args.llama_cpp, hf_dir, files["f32"], "f32", True, log)
    convert(args.llama_cpp, hf_dir, files["f16"], "f16", True, log)

    golden["features/images"] = np.asarray(FEATURE_PHOTOS)
    batch = np.stack([pixels[name] for name in FEATURE_PHOTOS])
    for kind in ("f32", "f16"):
        golden[f"features/{kind}"] = image_features(rounded_like_file(model, files[kind]), batch)
    golden |= prompt
    np.savez_compressed(out / "golden.npz", **golden)
    special = {t: tok.convert_tokens_to_ids(t) for t in ["<bos>", "<eos>", *GEMMA_TURNS, *IMAGE_MARKERS, SOFT_TOKEN]}
    meta = {"converter": CONVERTER_VERSION, "transformers": transformers.__version__, "torch": torch.__version__,
            "seed": seed, "config": model.config.to_dict(), "preprocessor": PREPROCESSOR, "special_tokens": special,
            "tokens_per_image": TOKENS_PER_IMAGE, "photos": photo_names(out / "photos"),
            "sha256": {p.name: file_sha256(p) for p in [*files.values(), out / "golden.npz"]}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
