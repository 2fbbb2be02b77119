"""Gemma 4's image encoder on the executor: its vision tower and multimodal embedder, read from llama.cpp's projector
GGUF (`convert_hf_to_gguf.py --mmproj`, projector type "gemma4v").

An image keeps its aspect ratio: the processor resizes it to a grid of W x H patches (p pixels each, both sides a
multiple of k = 3 patches) holding at most max_soft_tokens k x k blocks, so it becomes T = W H / k^2 soft tokens, a
number that varies with the image. One image per step (P = W H patch rows, D_v the tower's width, D the text model's),
as transformers' Gemma4Model.get_image_features computes it:

    x = (2 pixels - 1) W_patch + pos_x[x] + pos_y[y]          # no bias; two learnt tables by column and row
    for each layer (sandwich norms, all RMSNorm times w as stored):
        h = RMSNorm(x); q, k, v = h W_q, h W_k, h W_v
        q, k = RMSNorm per head (times w), then 2-D RoPE      # first half of a head by x, second by y, theta 100
        v = RMSNorm per head (no weight)
        x += RMSNorm_post(attention(q, k, v) W_o)             # bidirectional over the image, scale 1
        x += RMSNorm_post(W_down (gelu_tanh(h W_gate) * h W_up)), h = RMSNorm(x)
    t = avg_pool(x, k x k blocks) * sqrt(D_v)                 # [T, D_v], blocks in row-major order
    out = RMSNorm(t) W_proj                                   # no weight: [T, D], the soft tokens

Two rearrangements make it run on the encoder kernels as they are, with the same products:
- RoPE: each half of a head rotates its pairs (i, i + d/4) (rotate-half within the half). The rows of W_q and W_k
  (and the q and k norm weights) are permuted per head at load, quarters 0, 2, 1, 3, so those pairs become
  (i, i + d/2), the pairs encoder_qk_norm_rope rotates; a per-patch table holds the angles (x or y times the
  frequency). q and k permuted alike leave every dot product as it was.
- pooling: the patches go in block by block (each block's k^2 patches together, blocks row-major), so the pool is
  avg_pool2d over k x k "images"; attention does not depend on the order of its rows.
The sqrt(D_v) scale before the weightless RMSNorm is folded into its epsilon (RMSNorm_eps(s x) = RMSNorm_{eps/s^2}(x)).
Clipped linears (Gemma4ClippableLinear: `<weight>.input_min` ... beside a matrix) clamp its input and output
(kernels/clamp.wgsl). Projector files with layer scalars or standardisation tensors are refused.
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
from gpu.ops.transformer import glu_mul, rms_norm
from gpu.program import Executor, Program, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import GGUFSource, Matrix, Progress, Uploader
from models.gemma.clipped_linear import Bounds, clipped_linear, read_bounds
from models.vision.parts import run_in_parts
from models.vision.preprocess import to_rgb

DEFAULT_MERGE = 3  # pooling_kernel_size, when the file names none (llama.cpp's default too)
ROPE_THETA = 100.0  # Gemma4VisionConfig's default, which llama.cpp hard-codes
DEFAULT_MAX_SOFT_TOKENS = 280  # Gemma4ImageProcessor's default
SUPPORTED_SOFT_TOKENS = (70, 140, 280, 560, 1120)  # what the processor accepts
PATCH_K_ALIGN = 32


@dataclass(frozen=True)
class Gemma4VisionConfig:
    """The tower's shapes as a gemma4v projector file states them (`clip.vision.*`; RoPE theta and the pooling
    kernel as llama.cpp assumes them where the file is silent)."""

    patch_size: int  # p
    d_model: int  # D_v
    d_ffn: int
    n_layers: int
    n_heads: int
    eps: float
    d_text: int  # D
    merge: int  # k
    positions: int  # entries per axis of the position tables

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Gemma4VisionConfig:
        v = Keys.ClipVision
        d = int(f.value(v.EMBEDDING_LENGTH))
        _, table, _ = f.raw(_name(MODEL_TENSOR.V_ENC_EMBD_POS))  # ne: D_v, entries, 2
        c = cls(int(f.value(v.PATCH_SIZE)), d, int(f.value(v.FEED_FORWARD_LENGTH)), int(f.value(v.BLOCK_COUNT)),
                int(f.value(v.Attention.HEAD_COUNT)), float(f.value(v.Attention.LAYERNORM_EPS, 1e-6)),
                int(f.value(v.PROJECTION_DIM)), int(f.value(v.Projector.SCALE_FACTOR, DEFAULT_MERGE)),
                int(table[1]))
        if c.d_model % c.n_heads or c.head_dim % 8:
            raise GGUFFormatError(f"{f.path.name}: {c.n_heads} heads of width {c.d_model} are not supported (head "
                                  "size must be a multiple of 8: four quarters of even width)")
        return c


def target_size(height: int, width: int, patch: int, merge: int, max_soft_tokens: int) -> tuple[int, int]:
    """Gemma4ImageProcessor's aspect-preserving size (pixels): the largest multiples of k p on each side whose
    patches number at most max_soft_tokens k^2 (get_aspect_ratio_preserving_size)."""
    max_patches = max_soft_tokens * merge * merge
    factor = math.sqrt(max_patches * patch * patch / (height * width))
    side = merge * patch
    h = int(math.floor(factor * height / side)) * side
    w = int(math.floor(factor * width / side)) * side
    if h == 0 and w == 0:
        raise ValueError(f"a {width} x {height} image cannot be resized to whole {side}-pixel blocks")
    longest = (max_patches // merge ** 2) * side
    if h == 0:
        h, w = side, min(int(math.floor(width / height)) * side, longest)
    elif w == 0:
        h, w = min(int(math.floor(height / width)) * side, longest), side
    return h, w


def preprocess(image: Image.Image, patch: int, merge: int, max_soft_tokens: int) -> np.ndarray:
    """float32 [3, H, W] in [0, 1] as Gemma4ImageProcessor makes them: RGB (transparency onto white), resized with
    Pillow's bicubic filter to target_size (the aspect ratio kept), times 1/255; no normalisation (the tower maps
    v to 2 v - 1 itself)."""
    rgb = to_rgb(image)
    h, w = target_size(rgb.height, rgb.width, patch, merge, max_soft_tokens)
    if (rgb.height, rgb.width) != (h, w):
        rgb = rgb.resize((w, h), resample=Image.Resampling.BICUBIC)
    values = np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) * np.float32(1 / 255)
    return np.ascontiguousarray(values, dtype=np.float32)


def rope_permutation(head_dim: int) -> np.ndarray:
    """Within a head: new position j holds old index perm[j] (quarters 0, 2, 1, 3)."""
    q = head_dim // 4
    return np.concatenate([np.arange(0, q), np.arange(2 * q, 3 * q), np.arange(q, 2 * q), np.arange(3 * q, 4 * q)])


def _permute_rows(m: Matrix, perm: np.ndarray) -> Matrix:
    """The matrix with its rows in the order perm (any type: a row's blocks stay together)."""
    data = np.asarray(m.data).reshape(m.n, -1)[perm]
    return Matrix(m.qtype, m.k, m.n, np.ascontiguousarray(data).reshape(np.asarray(m.data).shape))


@dataclass
class _Layer:
    ln1: Tensor
    q: QuantWeight
    k: QuantWeight
    v: QuantWeight
    q_norm: Tensor
    k_norm: Tensor
    o: QuantWeight
    attn_post: Tensor
    ln2: Tensor
    gate: QuantWeight
    up: QuantWeight
    down: QuantWeight
    ffn_post: Tensor


def _name(kind: MODEL_TENSOR, i: int | None = None, suffix: str = "weight") -> str:
    base = TENSOR_NAMES[kind]
    return f"{base.format(bid=i) if i is not None else base}.{suffix}"


class Gemma4ImageEncoder:
    """Gemma 4's vision tower and embedder on an executor (models/vision's ImageEncoder, with a number of soft
    tokens per image: soft_tokens(pixels)). One program for the largest image (max_soft_tokens k^2 patches), run
    with the step's rows set to each image's patches."""

    def __init__(self, f: GGUFFile, executor: Executor, progress: Progress | None = None, *,
                 max_soft_tokens: int = DEFAULT_MAX_SOFT_TOKENS) -> None:
        if max_soft_tokens not in SUPPORTED_SOFT_TOKENS:
            raise ValueError(f"max_soft_tokens must be one of {SUPPORTED_SOFT_TOKENS}, not {max_soft_tokens}")
        self.path = f.path
        self.executor = ex = executor
        self.config = c = Gemma4VisionConfig.from_gguf(f)
        self.max_soft_tokens = max_soft_tokens
        self.tokens_per_image = max_soft_tokens  # the most an image becomes; soft_tokens() gives each one's count
        self.embedding_size = c.d_text
        src = GGUFSource(f)
        for name in f.tensors:
            if "std_" in name or "ls1" in name or "layer_scalar" in name:
                raise GGUFFormatError(f"{f.path.name}: {name}: layer scalars and standardisation are not supported")
        self.bounds: dict[str, Bounds] = {}  # a clipped linear's bounds, by its weight's name
        up = Uploader(ex, src.total_bytes, progress)
        d, hd = c.d_model, c.head_dim
        patch = src.array(_name(MODEL_TENSOR.V_ENC_EMBD_PATCH)).reshape(d, -1)
        if patch.shape[1] != 3 * c.patch_size ** 2:
            raise GGUFFormatError(f"{f.path.name}: patch embedding of {patch.shape[1]} columns for {c.patch_size}"
                                  "-pixel patches")
        self.patch_k = -(-patch.shape[1] // PATCH_K_ALIGN) * PATCH_K_ALIGN
        padded = np.zeros((d, self.patch_k), np.float32)
        padded[:, :patch.shape[1]] = patch
        self.patch = up.matrix("v.patch_embd", Matrix(GGMLQuantizationType.F32, self.patch_k, d, padded))
        self.pos_table = src.array(_name(MODEL_TENSOR.V_ENC_EMBD_POS)).reshape(2, -1, d)  # host: added per image
        perm = np.concatenate([h * hd + rope_permutation(hd) for h in range(c.n_heads)])

        def matrix(kind: MODEL_TENSOR, i: int, rows: int, k: int, order: np.ndarray | None = None) -> QuantWeight:
            name = _name(kind, i)
            m = src.matrix(name)
            if (m.n, m.k) != (rows, k):
                raise GGUFFormatError(f"{f.path.name}: {name} is {m.n} x {m.k}, expected {rows} x {k}")
            bounds = read_bounds(f, name.removesuffix(".weight"))
            weight = up.matrix(name, m if order is None else _permute_rows(m, order))
            if bounds is not None:
                self.bounds[weight.name] = bounds
            return weight

        def vector(kind: MODEL_TENSOR, i: int | None = None, order: np.ndarray | None = None) -> Tensor:
            name = _name(kind, i)
            a = src.array(name)
            return up.vector(name, a if order is None else a[order])

        T = MODEL_TENSOR
        rp = rope_permutation(hd)
        self.layers = [_Layer(vector(T.V_ENC_INPUT_NORM, i), matrix(T.V_ENC_ATTN_Q, i, d, d, perm),
                              matrix(T.V_ENC_ATTN_K, i, d, d, perm), matrix(T.V_ENC_ATTN_V, i, d, d),
                              vector(T.V_ENC_ATTN_Q_NORM, i, rp), vector(T.V_ENC_ATTN_K_NORM, i, rp),
                              matrix(T.V_ENC_ATTN_O, i, d, d), vector(T.V_ENC_ATTN_POST_NORM, i),
                              vector(T.V_ENC_POST_ATTN_NORM, i), matrix(T.V_ENC_FFN_GATE, i, c.d_ffn, d),
                              matrix(T.V_ENC_FFN_UP, i, c.d_ffn, d), matrix(T.V_ENC_FFN_DOWN, i, d, c.d_ffn),
                              vector(T.V_ENC_FFN_POST_NORM, i))
                       for i in range(c.n_layers)]
        proj_name = _name(T.V_MM_INP_PROJ)
        stored = src.matrix(proj_name)
        if stored.k != d or stored.n != c.d_text:
            raise GGUFFormatError(f"{f.path.name}: {proj_name} is {stored.n} x {stored.k}, expected {c.d_text} x {d}")
        self.proj = up.matrix(proj_name, stored)
        self.ones_head = up.vector("vision.ones_head", np.ones(hd, np.float32))
        self.ones = up.vector("vision.ones", np.ones(d, np.float32))
        self.weight_bytes = up.uploaded_bytes

        self.max_patches = n = max_soft_tokens * c.merge ** 2
        self.pixels_in = ex.tensor("vision.patches", (n, self.patch_k))
        self.pos_in = ex.tensor("vision.positions", (n, d))
        self.rope_in = ex.tensor("vision.rope", (n, hd))
        self.spans = ex.tensor("vision.spans", (n, 2), "u32")
        self.rows = ex.tensor("vision.rows", (n,), "u32", data=np.arange(n, dtype=np.uint32))
        self.out = ex.tensor("vision.soft_tokens", (max_soft_tokens, c.d_text))
        inv = 1.0 / ROPE_THETA ** (np.arange(0, hd // 2, 2, dtype=np.float32) / np.float32(hd // 2))
        self.inv_freq = inv.astype(np.float32)  # hd / 4 frequencies, one per pair of a half
        self._cuts: list[int] = []
        self.program = self._record()

    def _linear(self, b: ProgramBuilder, weight: QuantWeight, x: Tensor, y: Tensor, rows: int, tag: str) -> None:
        clipped_linear(b, weight, x, y, rows, self.bounds.get(weight.name), tag)

    def _record(self) -> Program:
        c = self.config
        n, d, hd, t = self.max_patches, c.d_model, c.head_dim, self.max_soft_tokens
        b = ProgramBuilder(self.executor, "vision")
        x = b.activation("x", (n, d))
        linear(b, self.patch, self.pixels_in, x, n, int8=False)
        residual_add(b, x, self.pos_in, None)
        for i, w in enumerate(self.layers):
            self._cuts.append(len(b._dispatches))
            h = b.activation(f"h{i}", (n, d))
            ops.layer_norm(b, x, w.ln1, h, c.eps, rms=True)
            q, k, v = (b.activation(f"{name}{i}", (n, d)) for name in "qkv")
            for weight, y, tag in zip((w.q, w.k, w.v), (q, k, v), "qkv"):
                self._linear(b, weight, h, y, n, f"{tag}{i}")
            ops.qk_norm_rope(b, q, k, w.q_norm, w.k_norm, self.rows, self.rope_in, heads=c.n_heads,
                             kv_heads=c.n_heads, eps=c.eps)
            vn = b.activation(f"vn{i}", (n, d))
            rms_norm(b, v, self.ones_head, vn, c.eps, heads=c.n_heads)
            a = b.activation(f"attn{i}", (n, d))
            ops.attention(b, q, k, vn, self.spans, a, heads=c.n_heads, kv_heads=c.n_heads, head_dim=hd, scale=1.0)
            o = b.activation(f"o{i}", (n, d))
            self._linear(b, w.o, a, o, n, f"o{i}")
            ops.layer_norm(b, o, w.attn_post, x, c.eps, rms=True, accumulate=True)
            h2 = b.activation(f"h2_{i}", (n, d))
            ops.layer_norm(b, x, w.ln2, h2, c.eps, rms=True)
            g = b.activation(f"gate{i}", (n, c.d_ffn))
            u = b.activation(f"up{i}", (n, c.d_ffn))
            self._linear(b, w.gate, h2, g, n, f"gate{i}")
            self._linear(b, w.up, h2, u, n, f"up{i}")
            act = b.activation(f"act{i}", (n, c.d_ffn))
            glu_mul(b, g, u, act)
            down = b.activation(f"down{i}", (n, d))
            self._linear(b, w.down, act, down, n, f"down{i}")
            ops.layer_norm(b, down, w.ffn_post, x, c.eps, rms=True, accumulate=True)
        pooled = b.activation("pooled", (t, d))
        ops.avg_pool2d(b, x, pooled, side=c.merge, kernel=c.merge)
        normed = b.activation("soft", (t, d))
        ops.layer_norm(b, pooled, self.ones, normed, c.eps / d, rms=True)  # the sqrt(D_v) scale, folded
        linear(b, self.proj, normed, self.out, t, int8=False)
        return b.build()

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """float32 [3, H, W] in [0, 1] as Gemma4ImageProcessor makes them (H and W vary with the image)."""
        c = self.config
        return preprocess(image, c.patch_size, c.merge, self.max_soft_tokens)

    def soft_tokens(self, pixels: np.ndarray) -> int:
        """How many soft tokens preprocessed pixels [3, H, W] become."""
        c = self.config
        side = c.patch_size * c.merge
        return (pixels.shape[-2] // side) * (pixels.shape[-1] // side)

    def patches(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[3, H, W] -> (patch rows [P, patch_k] as 2 v - 1 in the conv weight's order (channel, row, column), their
        (x, y) grid positions [P, 2]), block by block (k x k patches each, blocks in row-major order)."""
        c = self.config
        p, k = c.patch_size, c.merge
        gh, gw = pixels.shape[1] // p, pixels.shape[2] // p
        if pixels.shape[0] != 3 or gh * p != pixels.shape[1] or gw * p != pixels.shape[2] or gh % k or gw % k:
            raise ValueError(f"pixels {list(pixels.shape)} are not [3, H, W] of whole {k * p}-pixel blocks")
        if gh * gw > self.max_patches:
            raise ValueError(f"{gh * gw} patches, more than {self.max_patches}")
        cut = (2 * (pixels - np.float32(0.5))).reshape(3, gh // k, k, p, gw // k, k, p)
        cut = cut.transpose(1, 4, 2, 5, 0, 3, 6).reshape(gh * gw, 3 * p * p)  # by, bx, ky, kx | c, row, col
        yy, xx = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        pos = np.stack([xx, yy], -1).reshape(gh // k, k, gw // k, k, 2).transpose(0, 2, 1, 3, 4).reshape(-1, 2)
        out = np.zeros((gh * gw, self.patch_k), np.float32)
        out[:, :cut.shape[1]] = cut
        return out, pos

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        """Soft tokens of N preprocessed images of one size: [N, 3, H, W] float32 -> [N, soft_tokens, D] float32,
        one image after another."""
        pixels = np.asarray(pixels, np.float32)
        if pixels.ndim != 4:
            raise ValueError(f"pixels must be [N, 3, H, W], not {list(pixels.shape)}")
        out = np.empty((pixels.shape[0], self.soft_tokens(pixels[0]), self.config.d_text), np.float32)
        for i, image in enumerate(pixels):
            patches, pos = self.patches(image)
            if pos.max() >= self.pos_table.shape[1]:
                raise ValueError(f"a grid of {pos.max() + 1} patches a side is past the position table")
            out[i] = self._encode_one(patches, pos)[:out.shape[1]]
        return out

    def _rope(self, pos: np.ndarray) -> np.ndarray:
        """[P, head_dim] cos | sin per patch row, in the permuted head layout (first quarter x, second y)."""
        angles = np.concatenate([pos[:, :1] * self.inv_freq, pos[:, 1:2] * self.inv_freq], axis=1).astype(np.float32)
        return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)

    def _encode_one(self, patches: np.ndarray, pos: np.ndarray) -> np.ndarray:
        n = patches.shape[0]
        positions = (self.pos_table[0][pos[:, 0]] + self.pos_table[1][pos[:, 1]]).astype(np.float32)
        spans = np.tile(np.array([0, n], np.uint32), (n, 1))
        inputs = [(self.pixels_in, patches), (self.pos_in, positions), (self.rope_in, self._rope(pos)),
                  (self.spans, spans)]
        return run_in_parts(self.executor, self.program, self._cuts, n, inputs, self.out)
