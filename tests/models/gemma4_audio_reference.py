"""A numpy reference of Gemma 4's audio encoder read from its gemma4a projector file: the network of
models/audio_encoder/gemma4.py written out on the host (float32 products), checked against transformers on the
fixture, so a fault in the executor's version can be found a layer at a time. It takes exactly the frames
transformers' feature mask keeps (its convolutions' own padding then plays the mask's part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType, Keys, VisionProjectorType, dequantize

from audio.features import GEMMA4_MAX_SAMPLES, SAMPLE_RATE, gemma4_log_mel, gemma4_num_audio_tokens
from models.audio_encoder.gemma4 import Gemma4AudioConfig
from models.formats.gguf_file import GGUFFile, GGUFFormatError

# Gemma4AudioConfig's values, which the released checkpoints keep and llama.cpp hard-codes (the file is silent).
CHUNK_SIZE = 12  # attention_chunk_size
CONTEXT_LEFT = 13  # attention_context_left: a token sees itself and the CONTEXT_LEFT - 2 before it
CONTEXT_RIGHT = 0  # attention_context_right
LOGIT_CAP = 50.0  # attention_logit_cap
RESIDUAL_WEIGHT = 0.5  # residual_weight of the half-step feed-forwards
MAX_TIMESCALE = 10000.0  # the relative position table's


def _name(t: MODEL_TENSOR, bid: int | None = None) -> str:
    name = TENSOR_NAMES[t]
    return name.format(bid=bid) if bid is not None else name


@dataclass(frozen=True)
class Linear:
    """A matrix [out, in] (float32) with Gemma4ClippableLinear's bounds (infinite where the file has none)."""

    w: np.ndarray
    in_lo: float = -math.inf
    in_hi: float = math.inf
    out_lo: float = -math.inf
    out_hi: float = math.inf

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.clip(x, self.in_lo, self.in_hi) @ self.w.T
        return np.clip(y, self.out_lo, self.out_hi)


def _matrix(f: GGUFFile, name: str) -> np.ndarray:
    qtype, shape, raw = f.raw(name)
    if qtype == GGMLQuantizationType.F32:
        out = raw.view(np.float32)
    else:
        out = dequantize(raw, qtype).astype(np.float32)
    return np.ascontiguousarray(out.reshape(shape[::-1]), dtype=np.float32)


def _linear(f: GGUFFile, t: MODEL_TENSOR, bid: int | None = None) -> Linear:
    base = _name(t, bid)

    def bound(suffix: str, default: float) -> float:
        key = f"{base}.{suffix}"
        return float(f.f32(key)[0]) if key in f.tensors else default

    return Linear(_matrix(f, f"{base}.weight"), bound("input_min", -math.inf), bound("input_max", math.inf),
                  bound("output_min", -math.inf), bound("output_max", math.inf))


def _rms_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    y = x * (np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) ** np.float32(-0.5)
    return y * w if w is not None else y


def _layer_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * w


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def conv2d_stride2(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3 x 3 convolution, stride 2, zero padding 1, no bias: x [C_in, T, F], w [C_out, C_in, 3, 3] ->
    [C_out, ceil(T / 2), ceil(F / 2)]."""
    c_in, t, f = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))[:, ::2, ::2]  # [C, T', F', 3, 3]
    t_out, f_out = windows.shape[1:3]
    cols = windows.transpose(1, 2, 0, 3, 4).reshape(t_out * f_out, c_in * 9)
    return (cols @ w.reshape(w.shape[0], -1).T).T.reshape(w.shape[0], t_out, f_out)


def relative_positions(d_model: int) -> np.ndarray:
    """Gemma4AudioRelPositionalEncoding's table [L + 1, D_a] for distances m = 0 ... L: [sin(m w), cos(m w)]."""
    half = d_model // 2
    inv = np.exp(np.arange(half) * -(math.log(MAX_TIMESCALE) / max(half - 1, 1))).astype(np.float32)
    m = np.arange(CONTEXT_LEFT, dtype=np.float32)[:, None]  # distances 0 ... CONTEXT_LEFT - 1 (= L)
    scaled = m * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1).astype(np.float32)


def local_relative_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, rel: np.ndarray, window: int,
                             cap: float) -> np.ndarray:
    """softmax over j in [i - window + 1, i] of cap tanh((q_i . k_j + q_i . rel_{i-j}) / cap), times v_j.

    q, k, v: [N, H, d] (q and k already scaled); rel: [>= window, H, d] -> [N, H, d].
    """
    n, h, d = q.shape
    kp = np.concatenate([np.zeros((window - 1, h, d), np.float32), k])  # key j sits at row j + window - 1
    vp = np.concatenate([np.zeros((window - 1, h, d), np.float32), v])
    # keys of query i, oldest first: rows i ... i + window - 1 of the padded arrays, distance window - 1 ... 0
    kw = np.lib.stride_tricks.sliding_window_view(kp, window, axis=0)  # [N, H, d, W]
    vw = np.lib.stride_tricks.sliding_window_view(vp, window, axis=0)
    logits = np.einsum("nhd,nhdw->nhw", q, kw)
    logits += np.einsum("nhd,whd->nhw", q, rel[window - 1::-1])  # distance window - 1 - w
    logits = cap * np.tanh(logits / cap)
    valid = (np.arange(n)[:, None] + np.arange(window)[None, :]) >= window - 1  # the key exists (j >= 0)
    logits = np.where(valid[:, None, :], logits, -np.inf)
    logits -= logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("nhw,nhdw->nhd", p, vw).astype(np.float32)


@dataclass(frozen=True)
class _Layer:
    ffn: tuple[np.ndarray, Linear, Linear, np.ndarray]  # pre norm, up, down, post norm
    ffn2: tuple[np.ndarray, Linear, Linear, np.ndarray]
    attn_pre: np.ndarray
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    rel: np.ndarray  # W_rel [D_a, D_a]
    q_scale: np.ndarray  # [d]: d^-1/2 / ln 2 times softplus(per_dim_scale)
    attn_post: np.ndarray
    conv_pre: np.ndarray
    pw1: Linear
    dw: np.ndarray  # [D_a, K]
    conv_norm: np.ndarray
    pw2: Linear
    out_norm: np.ndarray


class ReferenceEncoder:
    """Gemma 4's audio tower and projector from a gemma4a projector file, in numpy."""

    sample_rate = SAMPLE_RATE
    max_samples = GEMMA4_MAX_SAMPLES

    def __init__(self, f: GGUFFile) -> None:
        kind = f.value(Keys.ClipAudio.PROJECTOR_TYPE, None)
        if kind != VisionProjectorType.GEMMA4A:
            raise GGUFFormatError(f"{f.path.name}: audio projector type {kind!r}, expected "
                                  f"{VisionProjectorType.GEMMA4A!r}")
        self.config = c = Gemma4AudioConfig.from_gguf(f)
        self.embedding_size = c.d_text
        T = MODEL_TENSOR
        self.convs = [(_matrix(f, f"{_name(T.A_ENC_CONV1D, i)}.weight"),
                       f.f32(f"{_name(T.A_ENC_CONV1D_NORM, i)}.weight")) for i in range(2)]
        self.w_in = _matrix(f, f"{_name(T.A_ENC_INP_PROJ)}.weight")
        q_scale = np.float32(c.head_dim ** -0.5 / math.log(2))
        self.layers = []
        for i in range(c.n_layers):
            def norm(t: MODEL_TENSOR, i: int = i) -> np.ndarray:
                return f.f32(f"{_name(t, i)}.weight")

            self.layers.append(_Layer(
                ffn=(norm(T.A_ENC_FFN_NORM), _linear(f, T.A_ENC_FFN_UP, i), _linear(f, T.A_ENC_FFN_DOWN, i),
                     norm(T.A_ENC_FFN_POST_NORM)),
                ffn2=(norm(T.A_ENC_FFN_NORM_1), _linear(f, T.A_ENC_FFN_UP_1, i), _linear(f, T.A_ENC_FFN_DOWN_1, i),
                      norm(T.A_ENC_FFN_POST_NORM_1)),
                attn_pre=norm(T.A_ENC_ATTN_PRE_NORM), q=_linear(f, T.A_ENC_ATTN_Q, i),
                k=_linear(f, T.A_ENC_ATTN_K, i), v=_linear(f, T.A_ENC_ATTN_V, i), o=_linear(f, T.A_ENC_OUTPUT, i),
                rel=_matrix(f, f"{_name(T.A_ENC_ATTN_K_REL, i)}.weight"),
                q_scale=q_scale * norm(T.A_ENC_PER_DIM_SCALE), attn_post=norm(T.A_ENC_ATTN_POST_NORM),
                conv_pre=norm(T.A_ENC_CONV_NORM), pw1=_linear(f, T.A_ENC_CONV_PW1, i),
                dw=_matrix(f, f"{_name(T.A_ENC_CONV_DW, i)}.weight"), conv_norm=norm(T.A_ENC_NORM_CONV),
                pw2=_linear(f, T.A_ENC_CONV_PW2, i), out_norm=norm(T.A_ENC_OUTPUT_NORM)))
        self.w_out = _matrix(f, f"{_name(T.A_ENC_OUT)}.weight")
        self.b_out = f.f32(f"{_name(T.A_ENC_OUT)}.bias")
        self.w_proj = _matrix(f, f"{_name(T.A_MM_INP_PROJ)}.weight")
        self.positions = relative_positions(c.d_model)  # [L + 1, D_a]

    @classmethod
    def from_file(cls, path: str | Path) -> ReferenceEncoder:
        return cls(GGUFFile(path))

    def features(self, samples: np.ndarray) -> np.ndarray:
        return gemma4_log_mel(samples)

    def soft_tokens(self, samples: int) -> int:
        return gemma4_num_audio_tokens(samples)

    def tower(self, features: np.ndarray) -> np.ndarray:
        """The tower's output before the projector: [frames, F] -> [N, D_o]."""
        c = self.config
        x = np.asarray(features, dtype=np.float32)[None]  # [1, T, F]
        for w, norm in self.convs:
            x = conv2d_stride2(x, w)  # [C, T', F']
            x = np.maximum(_layer_norm(x.transpose(1, 2, 0), norm, c.eps), 0).transpose(2, 0, 1)
        n = x.shape[1]
        x = x.transpose(1, 2, 0).reshape(n, -1) @ self.w_in.T  # [N, D_a]
        for layer in self.layers:
            x = self._layer(layer, x)
        return x @ self.w_out.T + self.b_out

    def encode(self, features: np.ndarray) -> np.ndarray:
        t = self.tower(features)
        return (_rms_norm(t, None, self.config.eps) @ self.w_proj.T).astype(np.float32)

    def _ffn(self, p: tuple[np.ndarray, Linear, Linear, np.ndarray], x: np.ndarray) -> np.ndarray:
        pre, up, down, post = p
        h = down(_silu(up(_rms_norm(x, pre, self.config.eps))))
        return x + np.float32(RESIDUAL_WEIGHT) * _rms_norm(h, post, self.config.eps)

    def _layer(self, p: _Layer, x: np.ndarray) -> np.ndarray:
        c = self.config
        n, h, d = x.shape[0], c.n_heads, c.head_dim
        x = self._ffn(p.ffn, x)
        a = _rms_norm(x, p.attn_pre, c.eps)
        q = p.q(a).reshape(n, h, d) * p.q_scale
        k = p.k(a).reshape(n, h, d) * np.float32(math.log(1 + math.e) / math.log(2))
        v = p.v(a).reshape(n, h, d)
        rel = (self.positions @ p.rel.T).reshape(-1, h, d)  # [L + 1, H, d]
        att = local_relative_attention(q, k, v, rel, CONTEXT_LEFT - 1, LOGIT_CAP).reshape(n, h * d)
        x = x + _rms_norm(p.o(att), p.attn_post, c.eps)
        # light conv: GLU, then the depthwise causal conv over time (K - 1 zeros before the first token)
        g = p.pw1(_rms_norm(x, p.conv_pre, c.eps))
        g = g[:, :c.d_model] * (1 / (1 + np.exp(-g[:, c.d_model:])))
        gp = np.concatenate([np.zeros((c.conv_kernel - 1, c.d_model), np.float32), g])
        conv = np.einsum("ndk,dk->nd", np.lib.stride_tricks.sliding_window_view(gp, c.conv_kernel, axis=0), p.dw)
        x = x + p.pw2(_silu(_rms_norm(conv, p.conv_norm, c.eps)))
        x = self._ffn(p.ffn2, x)
        return _rms_norm(x, p.out_norm, c.eps)
