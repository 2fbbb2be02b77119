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
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType, Keys
from PIL import Image

from gpu.ops import encoder as ops
from gpu.ops.full_attention import full_attention
from gpu.ops.matmul import linear
from gpu.ops.rows import residual_add
from gpu.program import Executor, Program, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import GGUFSource, Matrix, Progress, Uploader, fuse_rows, host_matrix
from models.vision.parts import run_in_parts
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
        return cls(int(f.value(v.IMAGE_SIZE)), int(f.value(v.PATCH_SIZE)), int(f.value(v.EMBEDDING_LENGTH)),
                   int(f.value(v.FEED_FORWARD_LENGTH)), int(f.value(v.BLOCK_COUNT)),
                   int(f.value(v.Attention.HEAD_COUNT)), float(f.value(v.Attention.LAYERNORM_EPS, 1e-6)),
                   int(f.value(v.PROJECTION_DIM)), int(f.value(v.Projector.SCALE_FACTOR, DEFAULT_MERGE)),
                   _triple(f, v.IMAGE_MEAN), _triple(f, v.IMAGE_STD)).checked(f.path.name)

    def checked(self, file_name: str) -> Gemma3VisionConfig:
        """This config, when the encoder can run it (else a GGUFFormatError naming the file)."""
        if self.image_size % self.patch_size or self.side % self.merge:
            raise GGUFFormatError(f"{file_name}: image size {self.image_size} is not a whole grid of "
                                  f"{self.patch_size}-pixel patches pooled by {self.merge}")
        if self.d_model % self.n_heads or self.head_dim % 4:
            raise GGUFFormatError(f"{file_name}: {self.n_heads} heads of width {self.d_model} are not supported "
                                  "(head size must be a multiple of 4)")
        return self


def _triple(f: GGUFFile, key: str) -> tuple[float, float, float]:
    values = [float(x) for x in f.value(key)]
    if len(values) != 3:
        raise GGUFFormatError(f"{f.path.name}: {key} must hold 3 values, not {len(values)}")
    return values[0], values[1], values[2]


TensorNames = Mapping[MODEL_TENSOR, str]  # name templates ("v.blk.{bid}.attn_q") of the tensors a file holds


def _name(names: TensorNames, kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> str:
    base = names[kind]
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


def _linear(b: ProgramBuilder, weight: QuantWeight, x: Tensor, y: Tensor, t_max: int) -> None:
    """y = W x in f32 whatever the executor's int8_matmuls asks for the text model's prompts: the tower runs once
    an image, and its products stay those of the reference."""
    linear(b, weight, x, y, t_max, int8=False)


class _Loader:
    """Reads a file's tower weights by kind (through its tensor names) and uploads them."""

    def __init__(self, f: GGUFFile, executor: Executor, names: TensorNames, progress: Progress | None) -> None:
        self.file_name = f.path.name
        self.src = GGUFSource(f)
        self.up = Uploader(executor, self.src.total_bytes, progress)
        self.names = names

    def vector(self, kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> Tensor:
        name = _name(self.names, kind, i, suffix)
        return self.up.vector(name, self.src.array(name))

    def norm(self, kind: MODEL_TENSOR, i: int | None = None) -> tuple[Tensor, Tensor]:
        return self.vector(kind, i), self.vector(kind, i, "bias")

    def matrix(self, kind: MODEL_TENSOR, i: int, rows: int, k: int) -> QuantWeight:
        name = _name(self.names, kind, i)
        m = self.src.matrix(name)
        if (m.n, m.k) != (rows, k):
            raise GGUFFormatError(f"{self.file_name}: {name} is {m.n} x {m.k}, expected {rows} x {k}")
        return self.up.matrix(name, m)

    def layer(self, i: int, c: Gemma3VisionConfig) -> _Layer:
        d = c.d_model
        kinds = (MODEL_TENSOR.V_ENC_ATTN_Q, MODEL_TENSOR.V_ENC_ATTN_K, MODEL_TENSOR.V_ENC_ATTN_V)
        names = [_name(self.names, kind, i) for kind in kinds]
        matrices = [self.src.matrix(n) for n in names]
        for name, m in zip(names, matrices):
            if (m.n, m.k) != (d, d):
                raise GGUFFormatError(f"{self.file_name}: {name} is {m.n} x {m.k}, expected {d} x {d}")
        fused = fuse_rows(matrices)
        biases = [self.src.array(_name(self.names, kind, i, "bias")) for kind in kinds]
        if fused is not None:
            qkv = [self.up.matrix(f"v.blk.{i}.attn_qkv", fused)]
            qkv_bias = [self.up.vector(f"v.blk.{i}.attn_qkv.bias", np.concatenate(biases))]
        else:
            qkv = [self.up.matrix(n, m) for n, m in zip(names, matrices)]
            qkv_bias = [self.up.vector(f"{n}.bias", b) for n, b in zip(names, biases)]
        return _Layer(self.norm(MODEL_TENSOR.V_ENC_INPUT_NORM, i), qkv, qkv_bias,
                      self.matrix(MODEL_TENSOR.V_ENC_ATTN_O, i, d, d),
                      self.vector(MODEL_TENSOR.V_ENC_ATTN_O, i, "bias"),
                      self.norm(MODEL_TENSOR.V_ENC_POST_ATTN_NORM, i),
                      self.matrix(MODEL_TENSOR.V_ENC_FFN_UP, i, c.d_ffn, d),
                      self.vector(MODEL_TENSOR.V_ENC_FFN_UP, i, "bias"),
                      self.matrix(MODEL_TENSOR.V_ENC_FFN_DOWN, i, d, c.d_ffn),
                      self.vector(MODEL_TENSOR.V_ENC_FFN_DOWN, i, "bias"))


class Gemma3ImageEncoder:
    """Gemma 3's vision tower and projector on an executor (models/vision's ImageEncoder): weights uploaded once,
    one program run per image. names and config: where the file keeps them, by default as llama.cpp's projector
    files do (gguf-py's tensor names, `clip.vision.*` keys)."""

    def __init__(self, f: GGUFFile, executor: Executor, progress: Progress | None = None, *,
                 names: TensorNames = TENSOR_NAMES, config: Gemma3VisionConfig | None = None) -> None:
        self.path = f.path
        self.executor = ex = executor
        self.config = c = config or Gemma3VisionConfig.from_gguf(f)
        self.tokens_per_image = c.tokens_per_image
        self.embedding_size = c.d_text
        load = _Loader(f, ex, names, progress)
        src, up = load.src, load.up
        # The patch embedding: a conv weight [D_v, 3, p, p] (GGUF ne p, p, 3, D_v) as a matrix of 3 p p columns.
        patch = src.array(_name(names, MODEL_TENSOR.V_ENC_EMBD_PATCH)).reshape(c.d_model, -1)
        self.patch_k = -(-patch.shape[1] // PATCH_K_ALIGN) * PATCH_K_ALIGN
        padded = np.zeros((c.d_model, self.patch_k), np.float32)
        padded[:, :patch.shape[1]] = patch
        self.patch = up.matrix("v.patch_embd", Matrix(GGMLQuantizationType.F32, self.patch_k, c.d_model, padded))
        self.patch_bias = load.vector(MODEL_TENSOR.V_ENC_EMBD_PATCH, suffix="bias")
        positions = src.array(_name(names, MODEL_TENSOR.V_ENC_EMBD_POS)).reshape(-1, c.d_model)
        if positions.shape[0] != c.n_patches:
            raise GGUFFormatError(f"{f.path.name}: {positions.shape[0]} position embeddings for {c.n_patches} patches")
        self.positions = up.tensor("v.position_embd", positions)
        self.layers = [load.layer(i, c) for i in range(c.n_layers)]
        self.post_norm = load.norm(MODEL_TENSOR.V_POST_NORM)
        self.soft_norm = load.vector(MODEL_TENSOR.V_MM_SOFT_EMB_NORM)
        # HF's mm_input_projection_weight [D_v, D] (y = x W), stored so: GGUF rows of D values. Transposed to D rows
        # of D_v values for y = W x; float16 stays float16 (exact), other types are dequantised.
        proj_name = _name(names, MODEL_TENSOR.V_MM_INP_PROJ)
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
        # The program runs as one part per layer (cut before each), each holding the adapter's turn (gpu/turns.py),
        # so that the text model's steps on this executor and other models on the adapter get in between.
        self._cuts: list[int] = []
        self.program = self._record()

    def _record(self) -> Program:
        c = self.config
        n, d = c.n_patches, c.d_model
        b = ProgramBuilder(self.executor, "vision")
        x = b.activation("x", (n, d))
        _linear(b, self.patch, self.pixels_in, x, n)
        residual_add(b, x, self.positions, self.patch_bias)
        scale = 1.0 / math.sqrt(c.head_dim)
        for i, w in enumerate(self.layers):
            self._cuts.append(len(b._dispatches))
            h = b.activation(f"h{i}", (n, d))
            ops.layer_norm(b, x, w.ln1[0], h, c.eps, beta=w.ln1[1])
            q, k, v, offsets = ops.qkv_projection(b, w.qkv, w.qkv_bias, h, n, i, int8=False)  # f32, as _linear
            a = b.activation(f"attn{i}", (n, d))
            if len(w.qkv) == 1:  # scores by register tiles: 5x faster than encoder_attention on lavapipe at 1024 rows
                full_attention(b, q, a, n, c.n_heads, c.head_dim, scale)
            else:
                ops.attention(b, q, k, v, self._spans, a, heads=c.n_heads, kv_heads=c.n_heads, head_dim=c.head_dim,
                              scale=scale, offsets=offsets)
            o = b.activation(f"o{i}", (n, d))
            _linear(b, w.o, a, o, n)
            residual_add(b, x, o, w.o_bias)
            h2 = b.activation(f"h2_{i}", (n, d))
            ops.layer_norm(b, x, w.ln2[0], h2, c.eps, beta=w.ln2[1])
            u = b.activation(f"up{i}", (n, c.d_ffn))
            _linear(b, w.up, h2, u, n)
            g = b.activation(f"gelu{i}", (n, c.d_ffn))
            ops.gelu(b, u, g, bias=w.up_bias, tanh=True)
            down = b.activation(f"down{i}", (n, d))
            _linear(b, w.down, g, down, n)
            residual_add(b, x, down, w.down_bias)
        y = b.activation("post", (n, d))
        ops.layer_norm(b, x, self.post_norm[0], y, c.eps, beta=self.post_norm[1])
        t = c.tokens_per_image
        pooled = b.activation("pooled", (t, d))
        ops.avg_pool2d(b, y, pooled, side=c.side, kernel=c.merge)
        normed = b.activation("soft", (t, d))
        ops.layer_norm(b, pooled, self.soft_norm, normed, c.eps, rms=True)
        _linear(b, self.proj, normed, self.out, t)
        return b.build()

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """float32 [3, S, S] as Gemma3ImageProcessor makes them (models/vision/preprocess.py)."""
        c = self.config
        return preprocess(image, c.image_size, c.image_mean, c.image_std)

    def soft_tokens(self, pixels: np.ndarray) -> int:
        """Every image becomes tokens_per_image soft tokens (the processor resizes it to S x S)."""
        return self.tokens_per_image

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
        """[N, 3, S, S] float32 -> [N, tokens_per_image, D] float32, one image after another."""
        c = self.config
        pixels = np.asarray(pixels, np.float32)
        if pixels.ndim != 4 or pixels.shape[1:] != (3, c.image_size, c.image_size):
            raise ValueError(f"pixels must be [N, 3, {c.image_size}, {c.image_size}], not {list(pixels.shape)}")
        out = np.empty((pixels.shape[0], c.tokens_per_image, c.d_text), np.float32)
        for i, image in enumerate(pixels):
            out[i] = self._encode_one(self.patches(image))
        return out

    def _encode_one(self, patches: np.ndarray) -> np.ndarray:
        return run_in_parts(self.executor, self.program, self._cuts, self.config.n_patches,
                            [(self.pixels_in, patches)], self.out)
