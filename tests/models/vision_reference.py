"""A float64 numpy reference of Gemma 3's image encoder read from a projector GGUF (llama.cpp's layout), written
from transformers' SiglipVisionModel and Gemma3MultiModalProjector; tests/models/test_vision_parity.py holds it to
transformers on the tiny fixture, and test_vision_real_shape.py holds Hearth to it at the real model's shapes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES

from models.formats.gguf_file import GGUFFile
from models.formats.weights import GGUFSource
from models.vision.gemma3 import Gemma3VisionConfig


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_features(path: Path, pixels: np.ndarray) -> np.ndarray:
    """[N, 3, S, S] -> [N, tokens, D] in float64."""
    f = GGUFFile(path)
    c = Gemma3VisionConfig.from_gguf(f)
    src = GGUFSource(f)

    def w(kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> np.ndarray:
        base = TENSOR_NAMES[kind]
        return src.array(f"{base.format(bid=i) if i is not None else base}.{suffix}").astype(np.float64)

    d, s, p, heads = c.d_model, c.side, c.patch_size, c.n_heads
    patch = w(MODEL_TENSOR.V_ENC_EMBD_PATCH).reshape(d, -1)
    out = []
    for image in np.asarray(pixels, np.float64):
        cut = image.reshape(3, s, p, s, p).transpose(1, 3, 0, 2, 4).reshape(s * s, -1)
        x = cut @ patch.T + w(MODEL_TENSOR.V_ENC_EMBD_PATCH, suffix="bias") + \
            w(MODEL_TENSOR.V_ENC_EMBD_POS).reshape(s * s, d)
        for i in range(c.n_layers):
            h = _layer_norm(x, w(MODEL_TENSOR.V_ENC_INPUT_NORM, i), w(MODEL_TENSOR.V_ENC_INPUT_NORM, i, "bias"), c.eps)
            q, k, v = (h @ w(kind, i).T + w(kind, i, "bias") for kind in (
                MODEL_TENSOR.V_ENC_ATTN_Q, MODEL_TENSOR.V_ENC_ATTN_K, MODEL_TENSOR.V_ENC_ATTN_V))
            attn = np.empty_like(q)
            for head in range(heads):
                cols = slice(head * c.head_dim, (head + 1) * c.head_dim)
                scores = q[:, cols] @ k[:, cols].T / math.sqrt(c.head_dim)
                scores = np.exp(scores - scores.max(-1, keepdims=True))
                attn[:, cols] = (scores / scores.sum(-1, keepdims=True)) @ v[:, cols]
            x = x + attn @ w(MODEL_TENSOR.V_ENC_ATTN_O, i).T + w(MODEL_TENSOR.V_ENC_ATTN_O, i, "bias")
            h = _layer_norm(x, w(MODEL_TENSOR.V_ENC_POST_ATTN_NORM, i),
                            w(MODEL_TENSOR.V_ENC_POST_ATTN_NORM, i, "bias"), c.eps)
            up = _gelu_tanh(h @ w(MODEL_TENSOR.V_ENC_FFN_UP, i).T + w(MODEL_TENSOR.V_ENC_FFN_UP, i, "bias"))
            x = x + up @ w(MODEL_TENSOR.V_ENC_FFN_DOWN, i).T + w(MODEL_TENSOR.V_ENC_FFN_DOWN, i, "bias")
        y = _layer_norm(x, w(MODEL_TENSOR.V_POST_NORM), w(MODEL_TENSOR.V_POST_NORM, suffix="bias"), c.eps)
        k_ = c.merge
        pooled = y.reshape(s // k_, k_, s // k_, k_, d).mean(axis=(1, 3)).reshape(-1, d)
        normed = pooled / np.sqrt((pooled ** 2).mean(-1, keepdims=True) + c.eps) * w(MODEL_TENSOR.V_MM_SOFT_EMB_NORM)
        out.append(normed @ w(MODEL_TENSOR.V_MM_INP_PROJ).reshape(d, c.d_text))
    return np.stack(out)
