"""Gemma 3's image encoder on the executor: the SigLIP vision tower and Gemma 3's multimodal projector, read from
llama.cpp's projector GGUF (`convert_hf_to_gguf.py --mmproj`, projector type "gemma3").

One image per step (P = (S / p)^2 patch rows, D_v the tower's width, D the text model's), as transformers'
Gemma3Model.get_image_features computes it:

    x = patches(pixels) W_patch + b_patch + pos              # conv with stride = patch size; the patches are cut on
                                                             # the host, [P, 3 p p] -> [P, D_v]
    for each layer (pre-norm):
        h = LayerNorm1(x); q, k, v = h W_qkv + b_qkv         # one fused [3 D_v, D_v] weight when the types agree
        x += attention(q, k, v) W_o + b_o                    # bidirectional over the image's rows, 1/sqrt(d) scale
        x += gelu_tanh(LayerNorm2(x) W_up + b_up) W_down + b_down
    y = post_LayerNorm(x)                                    # [P, D_v]
    t = avg_pool(y, k x k blocks of the patch grid)          # [T, D_v], T = tokens_per_image (16 x 16 at 896 px)
    out = RMSNorm(t) * w_soft  W_proj                        # [T, D]: the soft tokens, in the text embedding space

GGUF particulars: the converter bakes Gemma's 1 + w into `mm.soft_emb_norm.weight` (so it multiplies as stored),
keeps `mm.input_projection.weight` as HF's [D_v, D] matrix (GGUF rows of D values: transposed here at load), writes
the patch and position embeddings F32 and the pooling factor (`clip.vision.projector.scale_factor`) only where it is
not 4. The patch matrix's 3 p p columns (588 at patch 14) are padded with zeros to a multiple of 32 for the matmul
kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType, Keys
from PIL import Image

from gpu.ops import encoder as ops
from gpu.ops.matmul import linear
from gpu.ops.rows import residual_add
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import GGUFSource, Matrix, Progress, Uploader, fuse_rows, host_matrix
from models.vision.preprocess import preprocess

DEFAULT_MERGE = 4  # patches per side of a soft token when the file names none (every released Gemma 3)
PATCH_K_ALIGN = 32  # the patch matrix's columns are padded to a multiple of this


@dataclass(frozen=True)
class Gemma3VisionConfig:
    image_size: int  # S: pixels per side
    patch_size: int  # p
    d_model: int  # D_v
    d_ffn: int
    n_layers: int
    n_heads: int
    eps: float  # LayerNorms and the soft-embedding RMSNorm
    d_text: int  # D: the text model's hidden size
    merge: int  # k: patches per side pooled into one token
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]

    @property
    def side(self) -> int:
        """Patches per side of the grid."""
        return self.image_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.side * self.side

    @property
    def tokens_per_image(self) -> int:
        return (self.side // self.merge) ** 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Gemma3VisionConfig:
        v = Keys.ClipVision
        config = cls(int(f.value(v.IMAGE_SIZE)), int(f.value(v.PATCH_SIZE)), int(f.value(v.EMBEDDING_LENGTH)),
                     int(f.value(v.FEED_FORWARD_LENGTH)), int(f.value(v.BLOCK_COUNT)),
                     int(f.value(v.Attention.HEAD_COUNT)), float(f.value(v.Attention.LAYERNORM_EPS, 1e-6)),
                     int(f.value(v.PROJECTION_DIM)), int(f.value(v.Projector.SCALE_FACTOR, DEFAULT_MERGE)),
                     _triple(f, v.IMAGE_MEAN), _triple(f, v.IMAGE_STD))
        if config.image_size % config.patch_size or config.side % config.merge:
            raise GGUFFormatError(f"{f.path.name}: image size {config.image_size} is not a whole grid of "
                                  f"{config.patch_size}-pixel patches pooled by {config.merge}")
        if config.d_model % config.n_heads or config.head_dim % 4:
            raise GGUFFormatError(f"{f.path.name}: {config.n_heads} heads of width {config.d_model} are not supported "
                                  "(head size must be a multiple of 4)")
        return config


def _triple(f: GGUFFile, key: str) -> tuple[float, float, float]:
    values = [float(x) for x in f.value(key)]
    if len(values) != 3:
        raise GGUFFormatError(f"{f.path.name}: {key} must hold 3 values, not {len(values)}")
    return values[0], values[1], values[2]


def _name(kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> str:
    base = TENSOR_NAMES[kind]
    return f"{base.format(bid=i) if i is not None else base}.{suffix}"


@dataclass
class _Layer:
    ln1: tuple[Tensor, Tensor]  # (gamma, beta)
    qkv: list[QuantWeight]  # one fused [3 D_v, D_v] weight, or q, k, v
    qkv_bias: list[Tensor]
    o: QuantWeight
    o_bias: Tensor
    ln2: tuple[Tensor, Tensor]
    up: QuantWeight
    up_bias: Tensor
    down: QuantWeight
    down_bias: Tensor


class Gemma3ImageEncoder:
    """Gemma 3's vision tower and projector on an executor (models/vision's ImageEncoder): weights uploaded once,
    one program run per image."""

    def __init__(self, f: GGUFFile, executor: Executor, progress: Progress | None = None) -> None:
        self.path = f.path
        self.executor = ex = executor
        self.config = c = Gemma3VisionConfig.from_gguf(f)
        self.tokens_per_image = c.tokens_per_image
        self.embedding_size = c.d_text
        src = GGUFSource(f)
        up = Uploader(ex, src.total_bytes, progress)

        def vector(kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> Tensor:
            name = _name(kind, i, suffix)
            return up.vector(name, src.array(name))

        def norm(kind: MODEL_TENSOR, i: int | None = None) -> tuple[Tensor, Tensor]:
            return vector(kind, i), vector(kind, i, "bias")

        def matrix(kind: MODEL_TENSOR, i: int) -> QuantWeight:
            name = _name(kind, i)
            return up.matrix(name, src.matrix(name))

        # The patch embedding: a conv weight [D_v, 3, p, p] (GGUF ne p, p, 3, D_v) as a matrix of 3 p p columns.
        patch = src.array(_name(MODEL_TENSOR.V_ENC_EMBD_PATCH)).reshape(c.d_model, -1)
        self.patch_k = -(-patch.shape[1] // PATCH_K_ALIGN) * PATCH_K_ALIGN
        padded = np.zeros((c.d_model, self.patch_k), np.float32)
        padded[:, :patch.shape[1]] = patch
        self.patch = up.matrix("v.patch_embd", Matrix(GGMLQuantizationType.F32, self.patch_k, c.d_model, padded))
        self.patch_bias = vector(MODEL_TENSOR.V_ENC_EMBD_PATCH, suffix="bias")
        positions = src.array(_name(MODEL_TENSOR.V_ENC_EMBD_POS)).reshape(-1, c.d_model)
        if positions.shape[0] != c.n_patches:
            raise GGUFFormatError(f"{f.path.name}: {positions.shape[0]} position embeddings for {c.n_patches} patches")
        self.positions = up.tensor("v.position_embd", positions)
        self.layers = [self._layer(up, src, i, vector, norm, matrix) for i in range(c.n_layers)]
        self.post_norm = norm(MODEL_TENSOR.V_POST_NORM)
        self.soft_norm = vector(MODEL_TENSOR.V_MM_SOFT_EMB_NORM)
        # HF's mm_input_projection_weight [D_v, D] (y = x W), stored so: GGUF rows of D values. Transposed to D rows
        # of D_v values for y = W x; float16 stays float16 (exact), other types are dequantised.
        proj_name = _name(MODEL_TENSOR.V_MM_INP_PROJ)
        stored = src.matrix(proj_name)
        if stored.k != c.d_text or stored.n != c.d_model:
            raise GGUFFormatError(f"{f.path.name}: {proj_name} is {stored.n} x {stored.k}, expected "
                                  f"{c.d_model} x {c.d_text}")
        proj = np.asarray(stored.data).view(np.float16).reshape(c.d_model, c.d_text) \
            if stored.qtype == GGMLQuantizationType.F16 else src.array(proj_name).reshape(c.d_model, c.d_text)
        self.proj = up.matrix(proj_name, host_matrix(np.ascontiguousarray(proj.T)))
        self.weight_bytes = up.uploaded_bytes

        self.pixels_in = ex.tensor("vision.patches", (c.n_patches, self.patch_k))
        self.out = ex.tensor("vision.soft_tokens", (c.tokens_per_image, c.d_text))
        self._spans = ex.tensor("vision.spans", (c.n_patches, 2), "u32",
                                data=np.tile(np.array([0, c.n_patches], np.uint32), (c.n_patches, 1)))
        self.program = self._record()

    @staticmethod
    def _layer(up: Uploader, src: GGUFSource, i: int, vector, norm, matrix) -> _Layer:  # type: ignore[no-untyped-def]
        kinds = (MODEL_TENSOR.V_ENC_ATTN_Q, MODEL_TENSOR.V_ENC_ATTN_K, MODEL_TENSOR.V_ENC_ATTN_V)
        names = [_name(kind, i) for kind in kinds]
        fused = fuse_rows([src.matrix(n) for n in names])
        biases = [src.array(_name(kind, i, "bias")) for kind in kinds]
        if fused is not None:
            qkv = [up.matrix(f"v.blk.{i}.attn_qkv", fused)]
            qkv_bias = [up.vector(f"v.blk.{i}.attn_qkv.bias", np.concatenate(biases))]
        else:
            qkv = [up.matrix(n, src.matrix(n)) for n in names]
            qkv_bias = [up.vector(f"{n}.bias", b) for n, b in zip(names, biases)]
        return _Layer(norm(MODEL_TENSOR.V_ENC_INPUT_NORM, i), qkv, qkv_bias, matrix(MODEL_TENSOR.V_ENC_ATTN_O, i),
                      vector(MODEL_TENSOR.V_ENC_ATTN_O, i, "bias"), norm(MODEL_TENSOR.V_ENC_POST_ATTN_NORM, i),
                      matrix(MODEL_TENSOR.V_ENC_FFN_UP, i), vector(MODEL_TENSOR.V_ENC_FFN_UP, i, "bias"),
                      matrix(MODEL_TENSOR.V_ENC_FFN_DOWN, i), vector(MODEL_TENSOR.V_ENC_FFN_DOWN, i, "bias"))

    def _record(self):  # type: ignore[no-untyped-def]
        c = self.config
        n, d = c.n_patches, c.d_model
        b = ProgramBuilder(self.executor, "vision")
        x = b.activation("x", (n, d))
        linear(b, self.patch, self.pixels_in, x, n)
        residual_add(b, x, self.positions, self.patch_bias)
        scale = 1.0 / math.sqrt(c.head_dim)
        for i, w in enumerate(self.layers):
            h = b.activation(f"h{i}", (n, d))
            ops.layer_norm(b, x, w.ln1[0], h, c.eps, beta=w.ln1[1])
            if len(w.qkv) == 1:
                qkv = b.activation(f"qkv{i}", (n, 3 * d))
                linear(b, w.qkv[0], h, qkv, n)
                ops.bias_add(b, qkv, w.qkv_bias[0])
                q = k = v = qkv
                offsets = (0, d, 2 * d)
            else:
                q, k, v = (b.activation(f"{name}{i}", (n, d)) for name in "qkv")
                for weight, bias, y in zip(w.qkv, w.qkv_bias, (q, k, v)):
                    linear(b, weight, h, y, n)
                    ops.bias_add(b, y, bias)
                offsets = (0, 0, 0)
            a = b.activation(f"attn{i}", (n, d))
            ops.attention(b, q, k, v, self._spans, a, heads=c.n_heads, kv_heads=c.n_heads, head_dim=c.head_dim,
                          scale=scale, offsets=offsets)
            o = b.activation(f"o{i}", (n, d))
            linear(b, w.o, a, o, n)
            residual_add(b, x, o, w.o_bias)
            h2 = b.activation(f"h2_{i}", (n, d))
            ops.layer_norm(b, x, w.ln2[0], h2, c.eps, beta=w.ln2[1])
            u = b.activation(f"up{i}", (n, c.d_ffn))
            linear(b, w.up, h2, u, n)
            g = b.activation(f"gelu{i}", (n, c.d_ffn))
            ops.gelu(b, u, g, bias=w.up_bias, tanh=True)
            down = b.activation(f"down{i}", (n, d))
            linear(b, w.down, g, down, n)
            residual_add(b, x, down, w.down_bias)
        y = b.activation("post", (n, d))
        ops.layer_norm(b, x, self.post_norm[0], y, c.eps, beta=self.post_norm[1])
        t = c.tokens_per_image
        pooled = b.activation("pooled", (t, d))
        ops.avg_pool2d(b, y, pooled, side=c.side, kernel=c.merge)
        normed = b.activation("soft", (t, d))
        ops.layer_norm(b, pooled, self.soft_norm, normed, c.eps, rms=True)
        linear(b, self.proj, normed, self.out, t)
        return b.build()

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """float32 [3, S, S] as Gemma3ImageProcessor makes them (models/vision/preprocess.py)."""
        c = self.config
        return preprocess(image, c.image_size, c.image_mean, c.image_std)

    def patches(self, pixels: np.ndarray) -> np.ndarray:
        """[3, S, S] -> [P, patch_k]: each patch's values in the conv weight's order (channel, row, column), patches
        in row-major order of the grid, zero-padded to patch_k columns."""
        c = self.config
        s, p = c.side, c.patch_size
        cut = pixels.reshape(3, s, p, s, p).transpose(1, 3, 0, 2, 4).reshape(c.n_patches, 3 * p * p)
        out = np.zeros((c.n_patches, self.patch_k), np.float32)
        out[:, :cut.shape[1]] = cut
        return out

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        """[N, 3, S, S] float32 -> [N, tokens_per_image, D] float32, one GPU step per image."""
        c = self.config
        pixels = np.asarray(pixels, np.float32)
        if pixels.ndim != 4 or pixels.shape[1:] != (3, c.image_size, c.image_size):
            raise ValueError(f"pixels must be [N, 3, {c.image_size}, {c.image_size}], not {list(pixels.shape)}")
        ex = self.executor
        out = np.empty((pixels.shape[0], c.tokens_per_image, c.d_text), np.float32)
        for i, image in enumerate(pixels):
            with ex.device.turns.turn():
                ex.write(self.pixels_in, self.patches(image))
                out[i], = ex.run(self.program, StepParams(n_tokens=c.n_patches), read=[self.out])
        return out
