"""A float64 numpy Gemma 4 vision tower and embedder, read from a projector GGUF (its weights dequantised), written
straight from transformers' Gemma4VisionModel and Gemma4MultimodalEmbedder (patches in the processor's row-major
order, the axial RoPE on each half of a head, pooling by patch positions, no rearrangement): the reference the GPU
encoder's quantised and real-shaped runs are held to (itself held to transformers on the tiny fixture).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import Keys

from models.formats.gguf_file import GGUFFile
from models.formats.weights import GGUFSource

ROPE_THETA = 100.0
MERGE = 3


def _rms(x: np.ndarray, eps: float, w: np.ndarray | None = None) -> np.ndarray:
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def _rope_half(x: np.ndarray, pos: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE over the last axis of x [P, H, d'] at positions pos [P]."""
    angles = pos[:, None] * inv[None, :]  # [P, d'/2]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :]
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def reference_features(path: Path, pixels: np.ndarray) -> np.ndarray:
    """[3, H, W] pixels in [0, 1] -> [T, D] soft tokens, in float64."""
    f = GGUFFile(path)
    src = GGUFSource(f)
    v = Keys.ClipVision
    d, heads, layers = (int(f.value(k)) for k in (v.EMBEDDING_LENGTH, v.Attention.HEAD_COUNT, v.BLOCK_COUNT))
    p, eps = int(f.value(v.PATCH_SIZE)), float(f.value(v.Attention.LAYERNORM_EPS))
    hd = d // heads

    def a(name: str) -> np.ndarray:
        return src.array(name).astype(np.float64)

    def mat(name: str) -> np.ndarray:
        m = src.matrix(name)
        return a(name).reshape(m.n, m.k)

    def clip(x: np.ndarray, base: str, kind: str) -> np.ndarray:
        lo, hi = f"{base}.{kind}_min", f"{base}.{kind}_max"
        if lo in f.tensors:
            x = np.clip(x, float(a(lo)[0]), float(a(hi)[0]))
        return x

    def lin(x: np.ndarray, base: str) -> np.ndarray:
        return clip(clip(x, base, "input") @ mat(f"{base}.weight").T, base, "output")

    _, h, w = pixels.shape
    gh, gw = h // p, w // p
    patches = pixels.astype(np.float64).reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4).reshape(gh * gw, -1)
    yy, xx = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    px, py = xx.ravel(), yy.ravel()
    table = a("v.position_embd.weight").reshape(2, -1, d)
    x = (2 * (patches - 0.5)) @ a("v.patch_embd.weight").reshape(d, -1).T + table[0][px] + table[1][py]
    inv = 1.0 / ROPE_THETA ** (np.arange(0, hd // 2, 2, dtype=np.float64) / (hd // 2))
    for i in range(layers):
        blk = f"v.blk.{i}"
        hn = _rms(x, eps, a(f"{blk}.ln1.weight"))
        q = _rms(lin(hn, f"{blk}.attn_q").reshape(-1, heads, hd), eps, a(f"{blk}.attn_q_norm.weight"))
        k = _rms(lin(hn, f"{blk}.attn_k").reshape(-1, heads, hd), eps, a(f"{blk}.attn_k_norm.weight"))
        val = _rms(lin(hn, f"{blk}.attn_v").reshape(-1, heads, hd), eps)
        half = hd // 2
        q = np.concatenate([_rope_half(q[..., :half], px, inv), _rope_half(q[..., half:], py, inv)], -1)
        k = np.concatenate([_rope_half(k[..., :half], px, inv), _rope_half(k[..., half:], py, inv)], -1)
        scores = np.einsum("phd,qhd->hpq", q, k)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        attn = np.einsum("hpq,qhd->phd", scores, val).reshape(-1, d)
        x = x + _rms(lin(attn, f"{blk}.attn_out"), eps, a(f"{blk}.attn_post_norm.weight"))
        h2 = _rms(x, eps, a(f"{blk}.ln2.weight"))
        g = lin(h2, f"{blk}.ffn_gate")
        gelu = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        x = x + _rms(lin(gelu * lin(h2, f"{blk}.ffn_up"), f"{blk}.ffn_down"), eps, a(f"{blk}.ffn_post_norm.weight"))
    pooled = x.reshape(gh // MERGE, MERGE, gw // MERGE, MERGE, d).mean(axis=(1, 3)).reshape(-1, d) * np.sqrt(d)
    return _rms(pooled, eps) @ mat("mm.input_projection.weight").T
