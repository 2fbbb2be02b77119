"""Gemma 3 (text) on the executor, from a GGUF file as llama.cpp's converter writes it.

One step, for T tokens at positions pos..pos+T-1:

    x = embed(ids) * sqrt(D)                                   # x: [T, D]
    for each layer:
        h = rms_norm(x) * attn_norm
        q, k, v = h [Wq|Wk|Wv]                                 # one product where the types allow
        q = rope(rms_norm(q) * q_norm); k = rope(rms_norm(k) * k_norm)
        cache[pos:pos+T] = k, v                                # paged: rows of a shared pool
        a = attention(q, cache)   (sliding window on 5 of every 6 layers, global on the 6th)
        x += rms_norm(a Wo) * post_attention_norm
        h = rms_norm(x) * ffn_norm
        x += rms_norm((gelu_tanh(h Wgate) * h Wup) Wdown) * post_ffw_norm   # gate|up fused
    logits = rms_norm(x[last]) * output_norm  E^T             # tied output head: [R, V]
    next = sample(logits)                                      # on the GPU: argmax or Gumbel-max

The T tokens may belong to several sequences (a prefill chunk, or one decode token each of a
batch): the row table gives each token's position and sequence, `last` lists each sequence's
last token (see models/step_io.py). With int8 activations (a model's int8_activations), decode steps may keep
the feed-forward's h and its GLU output as int8 blocks between dispatches (gpu/ops/quantised.py), where
gpu/ops/matmul.py's quantises_ffn_input / quantises_glu_output find that it pays; prompt steps have their
residual norms write h so for the int8 matmul tiles (quantises_prompt_input), rather than quantising it in each
linear.

GGUF particulars: the converter bakes HF's (1 + w) RMSNorm scale into the stored weights,
so norms multiply by the stored weight as is. Sliding layers use RoPE base 10k, global
layers the file's base (1M) with its linear scaling factor, if any.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gguf import MODEL_TENSOR, TENSOR_NAMES, Keys

from gpu.kv_cache import KVPool, rope_table
from gpu.ops import transformer as ops
from gpu.ops.attention_prompt import attention_prompt
from gpu.ops.matmul import (
    NormedInput,
    QuantisedActivation,
    embedding,
    folds_norms,
    linear,
    linear_glu,
    linear_output,
    linear_stacked,
    quantised_activation,
    quantises_ffn_input,
    quantises_glu_output,
    quantises_prompt_input,
    stacks_in_one_matvec,
)
from gpu.ops.sampling import gumbel_sample as sample
from gpu.ops.transformer import RawQKV
from gpu.program import Executor, Program, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight, concat_rows, upload_weight
from models.gguf_file import GGUFFile
from models.step_io import StepIO

SWA_PATTERN = 6  # llama.cpp and HF: every 6th layer attends globally
ROPE_BASE_LOCAL = 10_000.0  # sliding-window layers (not stored in Gemma 3 GGUFs)

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Gemma3Config:
    n_layers: int
    d_model: int  # D
    n_heads: int  # H
    n_kv_heads: int  # Hkv
    head_dim: int  # Dh
    d_ffn: int
    eps: float
    window: int  # sliding window in tokens
    swa_pattern: int
    rope_base_global: float
    rope_base_local: float
    rope_scale_global: float
    n_ctx_train: int
    vocab_size: int

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    def is_sliding(self, layer: int) -> bool:
        return (layer + 1) % self.swa_pattern != 0

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Gemma3Config:
        embd_type, embd_shape, _ = f.raw(TENSOR_NAMES[MODEL_TENSOR.TOKEN_EMBD] + ".weight")
        n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
        d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
        scaling = f.value(Keys.Rope.SCALING_TYPE, "none")
        return cls(
            n_layers=int(f.value(Keys.LLM.BLOCK_COUNT)),
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=int(f.value(Keys.Attention.HEAD_COUNT_KV, n_heads)),
            head_dim=int(f.value(Keys.Attention.KEY_LENGTH, d_model // n_heads)),
            d_ffn=int(f.value(Keys.LLM.FEED_FORWARD_LENGTH)),
            eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6)),
            window=int(f.value(Keys.Attention.SLIDING_WINDOW, 0)),
            swa_pattern=int(f.value(Keys.Attention.SLIDING_WINDOW_PATTERN, SWA_PATTERN)),
            rope_base_global=float(f.value(Keys.Rope.FREQ_BASE, 1_000_000.0)),
            rope_base_local=float(f.value(Keys.Rope.FREQ_BASE_SWA, ROPE_BASE_LOCAL)),
            rope_scale_global=float(f.value(Keys.Rope.SCALING_FACTOR, 1.0)) if scaling == "linear" else 1.0,
            n_ctx_train=int(f.value(Keys.LLM.CONTEXT_LENGTH)),
            vocab_size=int(embd_shape[1]),
        )


@dataclass(frozen=True)
class Fused:
    """Matrices with the same input stacked along the rows: one product computes them all."""

    weight: QuantWeight
    parts: list[int]  # first row (output column) of each matrix


@dataclass
class LayerWeights:
    attn_norm: Tensor
    qkv: list[Fused]  # q|k|v as one matrix where their types allow (concat_rows), else q|k and v, or q, k, v
    q_norm: Tensor
    k_norm: Tensor
    o: QuantWeight
    post_attention_norm: Tensor
    ffn_norm: Tensor
    gate_up: list[Fused]  # gate|up as one matrix (one GeGLU dispatch) where their types allow
    down: QuantWeight
    post_ffw_norm: Tensor


class Gemma3:
    """Gemma 3's weights on the GPU and the programs that run its steps."""

    architecture = "gemma3"

    def __init__(self, executor: Executor, f: GGUFFile, n_ctx: int, progress: Progress | None = None) -> None:
        self.executor = executor
        self.config = c = Gemma3Config.from_gguf(f)
        self.n_ctx = n_ctx
        loader = _WeightLoader(executor, f, progress)
        self.token_embd = loader.matrix(MODEL_TENSOR.TOKEN_EMBD)
        self.output_norm = loader.vector(MODEL_TENSOR.OUTPUT_NORM)
        output_name = TENSOR_NAMES[MODEL_TENSOR.OUTPUT] + ".weight"
        self.output = loader.matrix(MODEL_TENSOR.OUTPUT) if output_name in f.tensors else self.token_embd
        self.layers = [
            LayerWeights(
                attn_norm=loader.vector(MODEL_TENSOR.ATTN_NORM, i),
                qkv=loader.fused([MODEL_TENSOR.ATTN_Q, MODEL_TENSOR.ATTN_K, MODEL_TENSOR.ATTN_V], i),
                q_norm=loader.vector(MODEL_TENSOR.ATTN_Q_NORM, i),
                k_norm=loader.vector(MODEL_TENSOR.ATTN_K_NORM, i),
                o=loader.matrix(MODEL_TENSOR.ATTN_OUT, i),
                post_attention_norm=loader.vector(MODEL_TENSOR.ATTN_POST_NORM, i),
                ffn_norm=loader.vector(MODEL_TENSOR.FFN_NORM, i),
                gate_up=loader.fused([MODEL_TENSOR.FFN_GATE, MODEL_TENSOR.FFN_UP], i),
                down=loader.matrix(MODEL_TENSOR.FFN_DOWN, i),
                post_ffw_norm=loader.vector(MODEL_TENSOR.FFN_POST_NORM, i),
            )
            for i in range(c.n_layers)
        ]
        self.weight_bytes = loader.uploaded_bytes
        self.rope_local = executor.tensor(
            "rope_local", (n_ctx, c.head_dim), data=rope_table(c.head_dim, n_ctx, c.rope_base_local))
        self.rope_global = executor.tensor(
            "rope_global", (n_ctx, c.head_dim),
            data=rope_table(c.head_dim, n_ctx, c.rope_base_global, c.rope_scale_global))

    def new_pool(self, kv_dtype: str, n_ctx: int, pool_tokens: int, n_slots: int, page_tokens: int) -> KVPool:
        c = self.config
        return KVPool(self.executor, f"kv_{kv_dtype}", [c.kv_width] * c.n_layers, min(n_ctx, self.n_ctx),
                      pool_tokens, n_slots, kv_dtype, page_tokens)

    def build_step(self, pool: KVPool, io: StepIO, t_max: int, r_max: int) -> Program:
        """Record the step program for up to t_max token rows (of any sequences in the pool), of
        which up to r_max reach the output head and the sampler."""
        c = self.config
        b = ProgramBuilder(self.executor, f"gemma3.t{t_max}r{r_max}")
        rows = io.rows
        x = b.activation("x", (t_max, c.d_model))  # residual stream
        embedding(b, self.token_embd, io.ids, x, t_max, scale=math.sqrt(c.d_model), rows=rows,
                  slot_tokens=io.slot_tokens)
        scale = 1.0 / math.sqrt(c.head_dim)
        h = b.activation("h0", (t_max, c.d_model))  # the next block's normalised input
        ops.rms_norm(b, x, self.layers[0].attn_norm, h, c.eps)
        # Decode steps fold each residual add and pre-norm into the matvec that consumes them (NormedInput: every
        # workgroup normalises its input itself), so the residual stream alternates between two buffers.
        fold = folds_norms(b, c.d_model, t_max)
        # Prompt chunks (many rows of few sequences) take the blocked prompt kernel; decode steps (one row per
        # sequence) the flash-decoding one, which splits each row's keys instead and, on a GPU, does
        # qk_norm_rope_store's work in its own prologue (RawQKV: no row needs another row's new key).
        prompt = t_max > r_max
        raw_qkv = not prompt and not b.device.is_software
        block_input: Tensor | NormedInput | QuantisedActivation = h
        for i, w in enumerate(self.layers):
            sliding = c.is_sliding(i)
            rope = self.rope_local if sliding else self.rope_global
            q, k, v = self._projections(b, w.qkv, block_input, t_max, f"qkv{i}")
            queries: Tensor | RawQKV
            if raw_qkv:
                queries = RawQKV(q, k, v, w.q_norm, w.k_norm, rope, c.eps)
            else:
                queries = b.activation(f"q{i}", (t_max, c.q_width))
                ops.qk_norm_rope_store(b, q, k, v, w.q_norm, w.k_norm, rope, pool, i, rows, queries,
                                       heads=c.n_heads, kv_heads=c.n_kv_heads, eps=c.eps)
            a = b.activation(f"attn{i}", (t_max, c.q_width))
            (attention_prompt if prompt else ops.attention)(
                b, queries, pool, i, rows, a, heads=c.n_heads, kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                window=c.window if sliding else 0, scale=scale)
            # a prompt's k-split o and down leave their parts for the residual norm to add (SplitSums)
            o = linear_output(b, w.o, a, f"o{i}", t_max)
            ffn_input: Tensor | NormedInput | QuantisedActivation
            gate_up = w.gate_up[0].weight
            if len(w.gate_up) == 1 and (quantises_prompt_input(b, [gate_up], t_max)
                                        or (not fold and quantises_ffn_input(b, gate_up, t_max))):
                # int8 activations: normalised and quantised once for an int8 gate-up (where no f32 gate-up can
                # normalise its input itself: the fold is faster, see quantises_ffn_input)
                ffn_input = quantised_activation(b, f"h2_{i}", t_max, c.d_model)
                ops.residual_norm(b, o, w.post_attention_norm, x, w.ffn_norm, ffn_input, c.eps)
            elif fold:
                assert isinstance(o, Tensor)  # decode matvecs split no k
                x_next = b.activation(f"x{i}a", (t_max, c.d_model))
                ffn_input = NormedInput(o, w.post_attention_norm, x, w.ffn_norm, x_next, c.eps)
                x = x_next
            else:
                ffn_input = b.activation(f"h2_{i}", (t_max, c.d_model))
                # x += rms_norm(o) * post_attention_norm, then the feed-forward's input is rms_norm(x) * ffn_norm
                ops.residual_norm(b, o, w.post_attention_norm, x, w.ffn_norm, ffn_input, c.eps)
            act: Tensor | QuantisedActivation
            if len(w.gate_up) == 1 and quantises_glu_output(b, gate_up, w.down, t_max,
                                                             isinstance(ffn_input, NormedInput)):
                act = quantised_activation(b, f"act{i}", t_max, c.d_ffn)  # int8 activations: for an int8 down
            else:
                act = b.activation(f"act{i}", (t_max, c.d_ffn))
            if len(w.gate_up) == 1:  # gelu_tanh(h2 Wgate) * (h2 Wup) in one dispatch
                linear_glu(b, w.gate_up[0].weight, ffn_input, act, t_max)
            else:
                (gate, _), (up, _) = self._projections(b, w.gate_up, ffn_input, t_max, f"gate_up{i}")
                ops.gelu_mul(b, gate, up, act)
            down = linear_output(b, w.down, act, f"down{i}", t_max)
            if i + 1 < c.n_layers:
                if fold:
                    assert isinstance(down, Tensor)
                    x_next = b.activation(f"x{i}b", (t_max, c.d_model))
                    block_input = NormedInput(down, w.post_ffw_norm, x, self.layers[i + 1].attn_norm, x_next, c.eps)
                    x = x_next
                else:
                    qkv = [f.weight for f in self.layers[i + 1].qkv]
                    block_input = (quantised_activation(b, f"h{i + 1}", t_max, c.d_model)
                                   if quantises_prompt_input(b, qkv, t_max)  # int8 activations: quantised once
                                   else b.activation(f"h{i + 1}", (t_max, c.d_model)))
                    ops.residual_norm(b, down, w.post_ffw_norm, x, self.layers[i + 1].attn_norm, block_input,
                                      c.eps)
            else:  # only each sequence's last token reaches the output head
                h = b.activation("last", (r_max, c.d_model))
                ops.residual_norm(b, down, w.post_ffw_norm, x, self.output_norm, h, c.eps, out_rows=io.out_rows)
        out = io.outputs(r_max)
        linear(b, self.output, h, out.logits, r_max)
        sample(b, out.logits, out.sampling, out.sampled)
        ops.store_tokens(b, out.sampled, io.out_rows, rows, io.slot_tokens)
        return b.build()

    @staticmethod
    def _projections(b: ProgramBuilder, fused: list[Fused], x: Tensor | NormedInput | QuantisedActivation,
                     t_max: int, name: str) -> list[tuple[Tensor, int]]:
        """x times each of the fused matrices; each projection as (output tensor, first column). Two matrices of
        different types that one matvec takes together (a Q4_K q|k and a Q6_K v) share one dispatch and output."""
        if (len(fused) == 2 and not isinstance(x, QuantisedActivation)
                and stacks_in_one_matvec(b, fused[0].weight, fused[1].weight, t_max)):
            first, second = fused
            y = b.activation(f"{name}.stacked", (t_max, first.weight.n + second.weight.n))
            linear_stacked(b, first.weight, second.weight, x, y, t_max)
            return [(y, start) for start in first.parts] + [(y, first.weight.n + start) for start in second.parts]
        columns: list[tuple[Tensor, int]] = []
        for j, f in enumerate(fused):
            y = b.activation(f"{name}.{j}", (t_max, f.weight.n))
            linear(b, f.weight, x, y, t_max)
            columns += [(y, start) for start in f.parts]
        return columns


class _WeightLoader:
    """Uploads named GGUF tensors, reporting bytes done to a progress callback."""

    def __init__(self, executor: Executor, f: GGUFFile, progress: Progress | None) -> None:
        self.executor, self.f, self.progress = executor, f, progress
        self.total = f.tensor_bytes
        self.read_bytes = 0  # file bytes uploaded, for progress
        self.uploaded_bytes = 0  # GPU bytes held (shards are padded to 4 bytes)

    def _name(self, kind: MODEL_TENSOR, layer: int | None) -> str:
        name = TENSOR_NAMES[kind]
        return (name.format(bid=layer) if layer is not None else name) + ".weight"

    def _done(self, file_bytes: int, gpu_bytes: int) -> None:
        self.read_bytes += file_bytes
        self.uploaded_bytes += gpu_bytes
        if self.progress:
            self.progress(self.read_bytes, self.total)

    def fused(self, kinds: list[MODEL_TENSOR], layer: int) -> list[Fused]:
        """Matrices with the same input, as few as possible (gpu/weights.py's concat_rows)."""
        matrices = []
        for kind in kinds:
            name = self._name(kind, layer)
            qtype, shape, raw = self.f.raw(name)
            matrices.append((name, qtype, shape[0], shape[1], raw))
        weights = []
        for group in concat_rows(matrices):
            weight = upload_weight(self.executor, group.name, group.qtype, group.k, group.rows, group.raw)
            self._done(group.file_bytes, weight.nbytes)
            weights.append(Fused(weight, group.row_starts))
        return weights

    def matrix(self, kind: MODEL_TENSOR, layer: int | None = None) -> QuantWeight:
        name = self._name(kind, layer)
        qtype, shape, raw = self.f.raw(name)
        weight = upload_weight(self.executor, name, qtype, shape[0], shape[1], raw)
        self._done(raw.nbytes, weight.nbytes)
        return weight

    def vector(self, kind: MODEL_TENSOR, layer: int | None = None) -> Tensor:
        name = self._name(kind, layer)
        data = self.f.f32(name)
        tensor = self.executor.tensor(name, data.shape, data=data)
        self._done(data.nbytes, tensor.nbytes)
        return tensor

