"""Gemma 4's audio encoder on the executor: its conformer tower and multimodal embedder, read from llama.cpp's
projector GGUF (`convert_hf_to_gguf.py --mmproj` of a Gemma4ForConditionalGeneration with an audio config, audio
projector type "gemma4a"), computed as transformers' Gemma4AudioModel and Gemma4Model.get_audio_features compute it.

Per clip, F = 128 mel features per frame, D_a the tower's width, H heads of d = D_a / H, D the text model's width,
N = ceil(ceil(frames / 2) / 2) soft tokens:

    x = features[None]                                        # [1, T, F]: one input channel
    x = relu(LayerNorm_c(conv2d_3x3/2(x)))  twice             # [T/2, F/2, C0] -> [T/4, F/4, C1], channels last
    x = flatten(x) W_in                                       # [N, D_a]
    for each layer:
        x += 0.5 RMSNorm_post(W_down silu(W_up RMSNorm(x)))             # half-step feed-forward
        x += RMSNorm_post(W_o attention(RMSNorm(x)))                     # local attention, below
        x += W_pw2 silu(RMSNorm(dwconv_causal(glu(W_pw1 RMSNorm(x)))))   # light conv, kernel K, causal
        x += 0.5 RMSNorm_post(W_down' silu(W_up' RMSNorm(x)))            # second half-step feed-forward
        x = RMSNorm_out(x)
    out = RMSNorm(x W_out + b_out) W_proj                     # the last norm without weight: [N, D]

Attention is local and relative: token i attends to tokens i - L + 1 ... i (L = attention_context_left - 1 = 12),
with logits softcap(ln(1 + e)/ln 2 (q'_i . k_j) + q'_i . r_{i-j}), softcap(z) = 50 tanh(z / 50),
q' = q d^-1/2 / ln 2 * s (s the softplus of the learnt per-dimension scale, which the converter stores already
applied) and r_m = W_rel [sin(m w), cos(m w)] (w_k = 10000^(-k / (D_a / 2 - 1))), computed at load. transformers
computes it in blocks of 12 queries against 24 keys under a mask; these are the pairs that mask leaves visible.
Clipped linears (Gemma4ClippableLinear: `<weight>.input_min` ... beside a matrix) clamp their input and output.
transformers' gradient_clipping clamps (1e10) cannot bind on the finite float32 activations here and are left out.

Lengths: transformers runs the frames its feature mask keeps and zeroes the rest, and the first convolution's rows
past ceil(frames / 2), before each convolution. The program runs on the frames zero-padded to 4 N with the step's
n_tokens = N, recorded once for the longest clip; the convolutions read rows past those two counts (a small
lengths tensor written per clip) as zero, so the N soft tokens are transformers'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, Keys, VisionProjectorType

from audio.features import GEMMA4_MAX_SAMPLES, GEMMA4_N_MELS, SAMPLE_RATE, gemma4_log_mel, gemma4_num_audio_tokens
from gpu.ops import encoder as ops
from gpu.ops.conv import Conv1dWeight, conv1d, upload_conv1d
from gpu.ops.matmul import linear
from gpu.ops.rows import residual_add
from gpu.program import Executor, Program, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import GGUFSource, Progress, Uploader
from models.gemma.clipped_linear import Bounds, clipped_linear, read_bounds
from models.vision.parts import run_in_parts

# Gemma4AudioConfig's values, which the released checkpoints keep and llama.cpp hard-codes (the file is silent).
CONTEXT_LEFT = 13  # attention_context_left: a token sees itself and the CONTEXT_LEFT - 2 before it
LOGIT_CAP = 50.0  # attention_logit_cap
RESIDUAL_WEIGHT = 0.5  # residual_weight of the half-step feed-forwards
MAX_TIMESCALE = 10000.0  # the relative position table's
SUBSAMPLING = 4  # frames per soft token: two stride-2 convolutions
WINDOW = CONTEXT_LEFT - 1  # keys a token sees
K_SCALE = math.log(1 + math.e) / math.log(2)


def _name(kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> str:
    base = TENSOR_NAMES[kind]
    return f"{base.format(bid=i) if i is not None else base}.{suffix}"


@dataclass(frozen=True)
class Gemma4AudioConfig:
    """The tower's shapes as a gemma4a projector file states them (`clip.audio.*`, the subsampling channels and the
    light conv's kernel from their tensors), the rest as Gemma4AudioConfig's defaults (module constants)."""

    d_model: int  # D_a
    d_ffn: int
    n_layers: int
    n_heads: int
    n_mels: int  # F
    eps: float
    d_text: int  # D
    conv_kernel: int  # K, the light conv's depthwise kernel
    channels: tuple[int, int]  # C0, C1 of the subsampling convolutions
    d_out: int  # D_o, the tower's output width

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Gemma4AudioConfig:
        a = Keys.ClipAudio
        _, dw, _ = f.raw(_name(MODEL_TENSOR.A_ENC_CONV_DW, 0))  # ne: K, D_a
        channels = tuple(int(f.raw(_name(MODEL_TENSOR.A_ENC_CONV1D_NORM, i))[1][0]) for i in range(2))
        _, out, _ = f.raw(_name(MODEL_TENSOR.A_ENC_OUT))  # ne: D_a, D_o
        c = cls(int(f.value(a.EMBEDDING_LENGTH)), int(f.value(a.FEED_FORWARD_LENGTH)), int(f.value(a.BLOCK_COUNT)),
                int(f.value(a.Attention.HEAD_COUNT)), int(f.value(a.NUM_MEL_BINS)),
                float(f.value(a.Attention.LAYERNORM_EPS, 1e-6)), int(f.value(a.PROJECTION_DIM)), int(dw[0]),
                (channels[0], channels[1]), int(out[1]))
        if c.d_model % c.n_heads:
            raise GGUFFormatError(f"{f.path.name}: {c.n_heads} heads do not divide the audio width {c.d_model}")
        if c.n_mels != GEMMA4_N_MELS:
            raise GGUFFormatError(f"{f.path.name}: {c.n_mels} mel bins; Gemma 4's front end makes {GEMMA4_N_MELS}")
        return c


def relative_positions(d_model: int) -> np.ndarray:
    """Gemma4AudioRelPositionalEncoding's rows [WINDOW, D_a] for distances m = 0 ... WINDOW - 1: [sin(m w), cos(m w)]
    (the table's last row, distance 12, only ever meets masked pairs)."""
    half = d_model // 2
    inv = np.exp(np.arange(half) * -(math.log(MAX_TIMESCALE) / max(half - 1, 1))).astype(np.float32)
    scaled = np.arange(WINDOW, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1).astype(np.float32)


@dataclass
class _FeedForward:
    pre: Tensor
    up: QuantWeight
    down: QuantWeight
    post: Tensor  # times RESIDUAL_WEIGHT


@dataclass
class _Layer:
    ffn: _FeedForward
    ffn2: _FeedForward
    attn_pre: Tensor
    q: QuantWeight
    k: QuantWeight
    v: QuantWeight
    o: QuantWeight
    rel: Tensor  # [WINDOW, D_a] relative keys
    q_scale: Tensor  # [d]
    attn_post: Tensor
    conv_pre: Tensor
    pw1: QuantWeight
    dw: Conv1dWeight  # depthwise, [D_a, 1, K]
    conv_norm: Tensor
    pw2: QuantWeight
    out_norm: Tensor


class Gemma4AudioEncoder:
    """Gemma 4's audio tower and projector on an executor (models/audio_encoder's AudioEncoder). One program for the
    longest clip (max_samples), run with the step's rows set to each clip's soft tokens."""

    sample_rate = SAMPLE_RATE
    max_samples = GEMMA4_MAX_SAMPLES

    def __init__(self, f: GGUFFile, executor: Executor, progress: Progress | None = None) -> None:
        kind = f.value(Keys.ClipAudio.PROJECTOR_TYPE, None)
        if kind != VisionProjectorType.GEMMA4A:
            raise GGUFFormatError(f"{f.path.name}: audio projector type {kind!r}, expected "
                                  f"{VisionProjectorType.GEMMA4A!r}")
        self.path = f.path
        self.executor = ex = executor
        self.config = c = Gemma4AudioConfig.from_gguf(f)
        self.embedding_size = c.d_text
        src = GGUFSource(f)
        up = Uploader(ex, src.total_bytes, progress)
        self.bounds: dict[str, Bounds] = {}
        d, T = c.d_model, MODEL_TENSOR

        def matrix(kind: MODEL_TENSOR, i: int | None, rows: int, k: int) -> QuantWeight:
            name = _name(kind, i)
            m = src.matrix(name)
            if (m.n, m.k) != (rows, k):
                raise GGUFFormatError(f"{f.path.name}: {name} is {m.n} x {m.k}, expected {rows} x {k}")
            weight = up.matrix(name, m)
            bounds = read_bounds(f, name.removesuffix(".weight"))
            if bounds is not None:
                self.bounds[weight.name] = bounds
            return weight

        def vector(kind: MODEL_TENSOR, i: int | None = None, scale: float = 1.0) -> Tensor:
            name = _name(kind, i)
            return up.vector(name, src.array(name) * np.float32(scale))

        self.convs: list[tuple[Tensor, Tensor]] = []
        c_in = 1
        for i, c_out in enumerate(c.channels):
            w = src.array(_name(T.A_ENC_CONV1D, i))  # [C_out, C_in, 3, 3]
            if w.shape != (c_out, c_in, 3, 3):
                raise GGUFFormatError(f"{f.path.name}: {_name(T.A_ENC_CONV1D, i)} is {list(w.shape)}, expected "
                                      f"[{c_out}, {c_in}, 3, 3]")
            moved = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(c_out, -1)  # input channels last
            self.convs.append((up.tensor(_name(T.A_ENC_CONV1D, i), moved), vector(T.A_ENC_CONV1D_NORM, i)))
            c_in = c_out
        self.flat = (c.n_mels // SUBSAMPLING) * c.channels[1]
        self.w_in = matrix(T.A_ENC_INP_PROJ, None, d, self.flat)
        positions = relative_positions(d)
        q_scale = np.float32(c.head_dim ** -0.5 / math.log(2))
        self.layers = []
        for i in range(c.n_layers):
            def ffn(pre: MODEL_TENSOR, up_: MODEL_TENSOR, down: MODEL_TENSOR, post: MODEL_TENSOR,
                    i: int = i) -> _FeedForward:
                return _FeedForward(vector(pre, i), matrix(up_, i, c.d_ffn, d), matrix(down, i, d, c.d_ffn),
                                    vector(post, i, RESIDUAL_WEIGHT))

            rel = positions @ src.array(_name(T.A_ENC_ATTN_K_REL, i)).reshape(d, d).T  # [WINDOW, D_a]
            dw = src.array(_name(T.A_ENC_CONV_DW, i)).reshape(d, 1, c.conv_kernel)
            self.layers.append(_Layer(
                ffn(T.A_ENC_FFN_NORM, T.A_ENC_FFN_UP, T.A_ENC_FFN_DOWN, T.A_ENC_FFN_POST_NORM),
                ffn(T.A_ENC_FFN_NORM_1, T.A_ENC_FFN_UP_1, T.A_ENC_FFN_DOWN_1, T.A_ENC_FFN_POST_NORM_1),
                vector(T.A_ENC_ATTN_PRE_NORM, i), matrix(T.A_ENC_ATTN_Q, i, d, d), matrix(T.A_ENC_ATTN_K, i, d, d),
                matrix(T.A_ENC_ATTN_V, i, d, d), matrix(T.A_ENC_OUTPUT, i, d, d),
                up.array(f"audio.rel{i}", rel),
                up.array(f"audio.q_scale{i}", q_scale * src.array(_name(T.A_ENC_PER_DIM_SCALE, i))),
                vector(T.A_ENC_ATTN_POST_NORM, i), vector(T.A_ENC_CONV_NORM, i), matrix(T.A_ENC_CONV_PW1, i, 2 * d, d),
                upload_conv1d(ex, _name(T.A_ENC_CONV_DW, i), dw, groups=d), vector(T.A_ENC_NORM_CONV, i),
                matrix(T.A_ENC_CONV_PW2, i, d, d), vector(T.A_ENC_OUTPUT_NORM, i)))
        self.w_out = matrix(T.A_ENC_OUT, None, c.d_out, d)
        self.b_out = up.vector(_name(T.A_ENC_OUT, suffix="bias"), src.array(_name(T.A_ENC_OUT, suffix="bias")))
        self.w_proj = matrix(T.A_MM_INP_PROJ, None, c.d_text, c.d_out)
        self.ones = up.array("audio.ones", np.ones(c.d_out, np.float32))
        self.weight_bytes = up.uploaded_bytes

        self.max_tokens = n = gemma4_num_audio_tokens(self.max_samples)
        self.features_in = ex.tensor("audio.features", (SUBSAMPLING * n * c.n_mels, 1))
        self.lengths = ex.tensor("audio.lengths", (2,), "u32")  # valid frames, valid rows after the first conv
        self.out = ex.tensor("audio.soft_tokens", (n, c.d_text))
        self._cuts: list[int] = []
        self.program = self._record()

    @classmethod
    def from_file(cls, path: str | Path, executor: Executor, progress: Progress | None = None) -> Gemma4AudioEncoder:
        return cls(GGUFFile(path), executor, progress)

    def features(self, samples: np.ndarray) -> np.ndarray:
        """float32 [frames, 128] as Gemma4AudioFeatureExtractor makes them (audio/features.py)."""
        return gemma4_log_mel(samples)

    def soft_tokens(self, samples: int) -> int:
        """How many soft tokens a clip of ``samples`` samples becomes (after the 30 s cut)."""
        return gemma4_num_audio_tokens(samples)

    def _linear(self, b: ProgramBuilder, weight: QuantWeight, x: Tensor, y: Tensor, tag: str) -> None:
        clipped_linear(b, weight, x, y, x.shape[0], self.bounds.get(weight.name), tag)

    def _ffn(self, b: ProgramBuilder, p: _FeedForward, x: Tensor, tag: str) -> None:
        """x += 0.5 RMSNorm_post(W_down silu(W_up RMSNorm(x))) (the 0.5 folded into the post-norm's weight)."""
        c = self.config
        n = x.shape[0]
        h = b.activation(f"{tag}_h", (n, c.d_model))
        ops.layer_norm(b, x, p.pre, h, c.eps, rms=True)
        u = b.activation(f"{tag}_up", (n, c.d_ffn))
        self._linear(b, p.up, h, u, f"{tag}_up")
        s = b.activation(f"{tag}_act", (n, c.d_ffn))
        ops.sigmoid_mul(b, u, s)
        down = b.activation(f"{tag}_down", (n, c.d_model))
        self._linear(b, p.down, s, down, f"{tag}_down")
        ops.layer_norm(b, down, p.post, x, c.eps, rms=True, accumulate=True)

    def _record(self) -> Program:
        c = self.config
        n, d = self.max_tokens, c.d_model
        b = ProgramBuilder(self.executor, "audio")
        f0 = c.n_mels // 2
        sub0 = b.activation("sub0", (2 * n * f0, c.channels[0]))
        w0, g0 = self.convs[0]
        ops.conv2d_norm(b, self.features_in, w0, g0, sub0, self.lengths, c_in=1, f_in=c.n_mels,
                        t_in_per_token=SUBSAMPLING, t_out_per_token=2, length_index=0, eps=c.eps)
        sub1 = b.activation("sub1", (n, self.flat))  # [N, F/4 * C1]: the flattened rows, channels last
        w1, g1 = self.convs[1]
        ops.conv2d_norm(b, sub0, w1, g1, sub1, self.lengths, c_in=c.channels[0], f_in=f0, t_in_per_token=2,
                        t_out_per_token=1, length_index=1, eps=c.eps)
        x = b.activation("x_in", (n, d))
        linear(b, self.w_in, sub1, x, n, int8=False)
        for i, w in enumerate(self.layers):
            self._cuts.append(len(b._dispatches))
            self._ffn(b, w.ffn, x, f"ffn{i}")
            a = b.activation(f"attn_in{i}", (n, d))
            ops.layer_norm(b, x, w.attn_pre, a, c.eps, rms=True)
            q, k, v = (b.activation(f"{name}{i}", (n, d)) for name in "qkv")
            for weight, y, tag in zip((w.q, w.k, w.v), (q, k, v), "qkv"):
                self._linear(b, weight, a, y, f"{tag}{i}")
            att = b.activation(f"attn{i}", (n, d))
            ops.attention_local_relative(b, q, k, v, w.rel, w.q_scale, att, heads=c.n_heads, k_scale=K_SCALE,
                                         cap=LOGIT_CAP)
            o = b.activation(f"o{i}", (n, d))
            self._linear(b, w.o, att, o, f"o{i}")
            ops.layer_norm(b, o, w.attn_post, x, c.eps, rms=True, accumulate=True)
            h = b.activation(f"conv_in{i}", (n, d))
            ops.layer_norm(b, x, w.conv_pre, h, c.eps, rms=True)
            g = b.activation(f"pw1_{i}", (n, 2 * d))
            self._linear(b, w.pw1, h, g, f"pw1_{i}")
            glu = b.activation(f"glu{i}", (n, d))
            ops.sigmoid_mul(b, g, glu, gate_offset=d)
            dw = b.activation(f"dw{i}", (n, d))
            conv1d(b, w.dw, glu, dw, t_in=None, padding=(c.conv_kernel - 1, 0))  # causal: K - 1 zeros before
            cn = b.activation(f"conv_norm{i}", (n, d))
            ops.layer_norm(b, dw, w.conv_norm, cn, c.eps, rms=True)
            s = b.activation(f"conv_act{i}", (n, d))
            ops.sigmoid_mul(b, cn, s)
            e = b.activation(f"pw2_{i}", (n, d))
            self._linear(b, w.pw2, s, e, f"pw2_{i}")
            residual_add(b, x, e, None)
            self._ffn(b, w.ffn2, x, f"ffn2_{i}")
            nx = b.activation(f"x{i}", (n, d))
            ops.layer_norm(b, x, w.out_norm, nx, c.eps, rms=True)
            x = nx
        t = b.activation("tower", (n, c.d_out))
        linear(b, self.w_out, x, t, n, int8=False)
        ops.bias_add(b, t, self.b_out)
        normed = b.activation("soft", (n, c.d_out))
        ops.layer_norm(b, t, self.ones, normed, c.eps, rms=True)
        linear(b, self.w_proj, normed, self.out, n, int8=False)
        return b.build()

    def encode(self, features: np.ndarray) -> np.ndarray:
        """Soft tokens of one clip's features: [frames, 128] -> [N, D] float32, N = ceil(ceil(frames / 2) / 2)."""
        c = self.config
        features = np.asarray(features, np.float32)
        if features.ndim != 2 or features.shape[1] != c.n_mels or features.shape[0] == 0:
            raise ValueError(f"features must be [frames, {c.n_mels}] with frames > 0, not {list(features.shape)}")
        n = -(-features.shape[0] // SUBSAMPLING)
        if n > self.max_tokens:
            raise ValueError(f"{features.shape[0]} frames make {n} soft tokens, more than {self.max_tokens}")
        frames = features.shape[0]
        padded = np.zeros((SUBSAMPLING * n, c.n_mels), np.float32)
        padded[:frames] = features
        lengths = np.array([frames, -(-frames // 2)], np.uint32)
        inputs = [(self.features_in, padded.reshape(-1, 1)), (self.lengths, lengths)]
        out = run_in_parts(self.executor, self.program, self._cuts, n, inputs, self.out)
        return out[:n]
