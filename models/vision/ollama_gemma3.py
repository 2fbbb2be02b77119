"""Gemma 3's vision tower inside an Ollama model blob.

Ollama's own gemma3 models (its converter, convert/convert_gemma3.go, for Gemma3ForConditionalGeneration) keep the
SigLIP tower and projector in the model GGUF itself (architecture "gemma3") rather than in a projector file: tensors
under `v.` and `mm.` with Ollama's names (model/models/gemma3/model_vision.go's struct tags: `v.blk.N.layer_norm1`,
`attn_output`, `mlp.fc1`, `v.post_layernorm`, `mm.mm_input_projection`, ...), the config under `gemma3.vision.*`
and `gemma3.mm.tokens_per_image`. The weights are the checkpoint's as llama.cpp's projector holds them: the
soft-embedding norm with Gemma's 1 + w baked in (Ollama adds 1 to every non-`v.` `*_norm.weight`), the input
projection as HF's [D_v, D] matrix. No mean and std are stored: Ollama's Gemma 3 image processor uses 0.5 for both,
as Gemma 3's processor config does.
"""

from __future__ import annotations

import math

from gguf import MODEL_TENSOR, Keys

from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.vision.gemma3 import Gemma3VisionConfig, TensorNames

ARCHITECTURE = "gemma3"
GEMMA_MEAN_STD = (0.5, 0.5, 0.5)
DEFAULT_TOKENS_PER_IMAGE = 256

# Ollama's metadata keys ({arch} = gemma3)
VISION_BLOCK_COUNT = "{arch}.vision.block_count"
VISION_EMBEDDING_LENGTH = "{arch}.vision.embedding_length"
VISION_FEED_FORWARD_LENGTH = "{arch}.vision.feed_forward_length"
VISION_IMAGE_SIZE = "{arch}.vision.image_size"
VISION_PATCH_SIZE = "{arch}.vision.patch_size"
VISION_HEAD_COUNT = "{arch}.vision.attention.head_count"
VISION_LAYERNORM_EPS = "{arch}.vision.attention.layer_norm_epsilon"
TOKENS_PER_IMAGE = "{arch}.mm.tokens_per_image"

NAMES: TensorNames = {
    MODEL_TENSOR.V_ENC_EMBD_PATCH: "v.patch_embedding",
    MODEL_TENSOR.V_ENC_EMBD_POS: "v.position_embedding",
    MODEL_TENSOR.V_ENC_INPUT_NORM: "v.blk.{bid}.layer_norm1",
    MODEL_TENSOR.V_ENC_ATTN_Q: "v.blk.{bid}.attn_q",
    MODEL_TENSOR.V_ENC_ATTN_K: "v.blk.{bid}.attn_k",
    MODEL_TENSOR.V_ENC_ATTN_V: "v.blk.{bid}.attn_v",
    MODEL_TENSOR.V_ENC_ATTN_O: "v.blk.{bid}.attn_output",
    MODEL_TENSOR.V_ENC_POST_ATTN_NORM: "v.blk.{bid}.layer_norm2",
    MODEL_TENSOR.V_ENC_FFN_UP: "v.blk.{bid}.mlp.fc1",
    MODEL_TENSOR.V_ENC_FFN_DOWN: "v.blk.{bid}.mlp.fc2",
    MODEL_TENSOR.V_POST_NORM: "v.post_layernorm",
    MODEL_TENSOR.V_MM_INP_PROJ: "mm.mm_input_projection",
    MODEL_TENSOR.V_MM_SOFT_EMB_NORM: "mm.mm_soft_emb_norm",
}


def holds_vision(f: GGUFFile) -> bool:
    """Whether a model GGUF carries Ollama's Gemma 3 vision tower."""
    return f.arch == ARCHITECTURE and f"{NAMES[MODEL_TENSOR.V_ENC_EMBD_PATCH]}.weight" in f.tensors


def config(f: GGUFFile) -> Gemma3VisionConfig:
    """The tower's config from Ollama's keys (the pooling from tokens_per_image, 256 when absent)."""
    image_size, patch_size = int(f.value(VISION_IMAGE_SIZE)), int(f.value(VISION_PATCH_SIZE))
    side = image_size // patch_size
    tokens = int(f.value(TOKENS_PER_IMAGE, DEFAULT_TOKENS_PER_IMAGE))
    per_side = math.isqrt(tokens)
    if per_side * per_side != tokens or per_side == 0 or side % per_side:
        raise GGUFFormatError(f"{f.path.name}: {tokens} tokens per image do not pool a {side}x{side} patch grid")
    ffn = f.value(VISION_FEED_FORWARD_LENGTH, None)
    if ffn is None:  # the up projection's rows
        ffn = f.tensor(f"{NAMES[MODEL_TENSOR.V_ENC_FFN_UP].format(bid=0)}.weight").shape[1]
    return Gemma3VisionConfig(
        image_size, patch_size, int(f.value(VISION_EMBEDDING_LENGTH)), int(ffn),
        int(f.value(VISION_BLOCK_COUNT)), int(f.value(VISION_HEAD_COUNT)), float(f.value(VISION_LAYERNORM_EPS, 1e-6)),
        int(f.value(Keys.LLM.EMBEDDING_LENGTH)), side // per_side, GEMMA_MEAN_STD, GEMMA_MEAN_STD).checked(f.path.name)
