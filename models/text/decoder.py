"""The text decoder every family plugs into: its config, its layers' weights and one step builder.

One step, for T token rows of any sequences in the KV pool (models/text/step_io.py):

    x = embed(ids) * embed_scale                                        # x: [T, D]
        (an image's rows: its encoder's rows as they are, io.images; they attend to each other both ways)
    for each layer i (sliding or full attention, or a recurrent layer; head_dims[i], kv_heads[i], d_ffn[i]):
        h = rms_norm(x) * attn_norm
        (a recurrent layer: a = recurrent_mixer(h), its per-sequence state in the pool's `recurrent`; then as below)
        q = rope(rms_norm(h Wq + bq) * q_norm)                          # q: [T, H, Dh_i]
        unless KV-shared: k = rope(rms_norm(h Wk + bk) * k_norm), v = h Wv + bv   # (v = k where the file has no Wv)
            cache[pos] = k, v (v rms-normalised first where v_norm)
        a = attention(q * query_scale, cache of layer i or the layer it shares, window on sliding layers,
                      scores softcapped where attn_softcap)
        x += rms_norm(a Wo) * post_attention_norm
        h = rms_norm(x) * ffn_norm
        y = feed_forward(h)                                             # hook: (act(h Wg) * h Wu) Wd
        x = block_output(x, y)                                          # hook: x += rms_norm(y) * post_ffw_norm
    logits = rms_norm(x[last]) * output_norm  Wout                     # tied to embed unless the file has output
    logits = softcap(logits)                                            # where the config says so
    logits = mask(logits)                                               # constrained rows: grammar's tokens only
    next = sample(logits)                                               # on the GPU: argmax or Gumbel-max

What a network lacks is read off its file's tensors: biases (Qwen 2), q/k norms (Qwen 3, Gemma 3/4: without them
q and k are only rotated), post-norms (Gemma 2-4: without them the residual adds are plain, x += a Wo). act is the
config's activation (gelu_tanh for Gemma, silu elsewhere); no_rope layers attend without RoPE (SmolLM3).

A family is a config reader (GGUF metadata -> DecoderConfig; standard_config reads the keys every llama.cpp
architecture writes) and a subclass overriding only the hooks where its network differs: load_globals and
load_layer (extra tensors), begin_step (per-step inputs such as per-layer embeddings), feed_forward (experts),
block_output (scaled residuals, per-layer inputs) and _rope (LongRoPE tables). A hybrid network names each layer's
kind (DecoderConfig.layer_kinds); its recurrent layers take three hooks: load_recurrent (their tensors),
recurrent_states (their per-sequence state shapes, gpu/recurrent_state.py) and recurrent_mixer (the step's part).
How each part runs (fused products, folded norms, int8 activations) is gpu/ops/blocks.py's choice.

Adding a family:
1. models/<family>.py: read_config(f) -> DecoderConfig from the file's keys (gguf-py's Keys), and a Decoder
   subclass with `architecture` (the GGUF general.architecture) and read_config; rope_interleaved where
   llama.cpp's converter permutes q/k rows for its interleaved RoPE (the llama architectures).
2. Override a hook only where the network differs from the diagram above; a difference every family may have
   (per-layer head dims or KV heads, windows, rope bases and scaling, softcaps, the activation) is a
   DecoderConfig field, with its kernel variant behind gpu/ops/blocks.py, not code in the family.
3. Register it in FAMILIES by its GGUF architecture name; models/text/engine.py finds it there.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, Keys

from gpu.kv_cache import KVPool, rope_table
from gpu.ops import blocks
from gpu.ops import transformer as ops
from gpu.ops.blocks import BlockInput, BlockOutput, Residual
from gpu.ops.matmul import embedding, linear
from gpu.program import Executor, Program, ProgramBuilder
from gpu.recurrent_state import RecurrentLayerState, RecurrentStatePool
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Fused, GGUFSource, Matrix, Uploader
from models.text.step_io import StepIO, sample_tokens

Progress = Callable[[int, int], None]
T = MODEL_TENSOR

# Decoder families by GGUF architecture name, as `module:class` (imported on use: they import this module)
FAMILIES = {
    "gemma": "models.gemma.gemma1:Gemma",
    "gemma2": "models.gemma.gemma2:Gemma2",
    "gemma3": "models.gemma.gemma3:Gemma3",
    "gemma4": "models.gemma.gemma4:Gemma4",
    "llama": "models.llama:Llama",
    "smollm3": "models.llama:SmolLM3",
    "qwen2": "models.qwen:Qwen2",
    "qwen3": "models.qwen:Qwen3",
    "phi3": "models.phi3:Phi3",
    "lfm2": "models.lfm2:LFM2",
    "qwen35": "models.qwen35:Qwen35",
}


def family(architecture: str) -> type[Decoder]:
    """The decoder class of a GGUF architecture (KeyError if none runs it)."""
    module, _, name = FAMILIES[architecture].partition(":")
    return getattr(importlib.import_module(module), name)


def tensor_name(kind: MODEL_TENSOR, layer: int | None = None, suffix: str | None = "weight") -> str:
    """A tensor's GGUF name: gguf-py's template for the kind, the layer filled in, and the suffix (None: none, as
    ssm_a has)."""
    name = TENSOR_NAMES[kind]
    name = name.format(bid=layer) if layer is not None else name
    return name if suffix is None else name + "." + suffix


def per_layer(value: object, n: int) -> list:
    """A per-layer metadata value: an array of n, or one scalar for every layer."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise GGUFFormatError(f"a per-layer array has {len(value)} values for {n} layers")
        return list(value)
    return [value] * n


@dataclass(frozen=True)
class DecoderConfig:
    """What a decoder's step reads from its file, per layer where layers differ."""

    n_layers: int
    d_model: int  # D
    n_heads: int  # H
    head_dims: tuple[int, ...]  # Dh per layer
    kv_heads: tuple[int, ...]  # per layer
    d_ffn: tuple[int, ...]  # per layer
    sliding: tuple[bool, ...]  # per layer: sliding-window attention, else full
    eps: float  # of every RMS norm
    window: int  # sliding window in tokens
    rope_base_full: float
    rope_base_swa: float
    rope_scale_full: float  # linear RoPE scaling of full layers (positions divided by it), 1 = none
    query_scale: float  # attention scores' scale
    embed_scale: float  # the token embedding's
    n_ctx_train: int
    vocab_size: int
    softcap: float = 0.0  # final logit softcap, 0 = none
    attn_softcap: float = 0.0  # attention logit softcap (Gemma 2), 0 = none
    v_norm: bool = False  # v rms-normalised (no weight) before it is cached
    n_shared_kv: int = 0  # the last n_shared_kv layers reuse the cache of an earlier layer of their kind
    d_ple: int = 0  # P: per-layer input width, 0 without per-layer embeddings
    n_experts: int = 0
    n_experts_used: int = 0
    activation: str = "gelu_tanh"  # of the gated feed-forward: gelu_tanh (GeGLU) or silu (SwiGLU)
    no_rope: tuple[bool, ...] = ()  # per layer: attention without RoPE (SmolLM3's every 4th); empty = none
    # per layer: "attention", or a recurrent kind its family runs (LFM2's "short_conv"); empty = all attention
    layer_kinds: tuple[str, ...] = ()
    rope_dims: int = 0  # dims of each head that RoPE turns, the first ones in pairs (i, i + R/2); 0 = all
    attn_output_gate: bool = False  # q's product carries a per-head output gate: a *= sigmoid(x Wgate) (Qwen3.5)
    # an image's rows see each other both ways on sliding layers only, causal on full ones (Gemma 4's larger kinds)
    images_both_ways_sliding_only: bool = False

    def attention(self, i: int) -> bool:
        """Whether layer i is an attention layer (else a recurrent one, with state rather than a KV cache)."""
        return not self.layer_kinds or self.layer_kinds[i] == "attention"

    def q_width(self, i: int) -> int:
        return self.n_heads * self.head_dims[i]

    def kv_width(self, i: int) -> int:
        return self.kv_heads[i] * self.head_dims[i]

    def shared(self, i: int) -> bool:
        """Whether layer i reads an earlier layer's cache rather than writing its own."""
        return i >= self.n_layers - self.n_shared_kv

    def cache_layer(self, i: int) -> int:
        """The layer whose cache layer i attends over: its own, or (KV-shared) the last unshared one of its kind."""
        if not self.shared(i):
            return i
        first = self.n_layers - self.n_shared_kv
        return max(j for j in range(first) if self.sliding[j] == self.sliding[i])


def standard_config(f: GGUFFile, **fields: object) -> DecoderConfig:
    """A decoder config from the metadata keys every llama.cpp architecture writes: every layer full attention
    with the file's RoPE base (and linear scaling), query scale 1/sqrt(Dh), no embedding scale, a SwiGLU
    feed-forward. fields: the family's differences (DecoderConfig fields)."""
    _, embd_shape, _ = f.raw(tensor_name(T.TOKEN_EMBD))
    n_layers = int(f.value(Keys.LLM.BLOCK_COUNT))
    n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
    d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
    head_dim = int(f.value(Keys.Attention.KEY_LENGTH, d_model // n_heads))
    rope_base = float(f.value(Keys.Rope.FREQ_BASE, 10_000.0))
    linear = f.value(Keys.Rope.SCALING_TYPE, "none") == "linear"
    config = DecoderConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        head_dims=(head_dim,) * n_layers,
        kv_heads=tuple(int(v) for v in per_layer(f.value(Keys.Attention.HEAD_COUNT_KV, n_heads), n_layers)),
        d_ffn=tuple(int(v) for v in per_layer(f.value(Keys.LLM.FEED_FORWARD_LENGTH), n_layers)),
        sliding=(False,) * n_layers,
        eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-5)),
        window=0,
        rope_base_full=rope_base,
        rope_base_swa=rope_base,
        rope_scale_full=float(f.value(Keys.Rope.SCALING_FACTOR, 1.0)) if linear else 1.0,
        query_scale=1.0 / math.sqrt(head_dim),
        embed_scale=1.0,
        n_ctx_train=int(f.value(Keys.LLM.CONTEXT_LENGTH)),
        vocab_size=int(embd_shape[1]),
        activation="silu",
    )
    return replace(config, **fields)  # type: ignore[arg-type]


@dataclass
class LayerWeights:
    """A block's tensors on the GPU."""

    attn_norm: Tensor
    qkv: list[Fused]  # q|k|v as few matrices as their types allow; q alone in KV-shared layers
    q_norm: Tensor  # without q/k norms (qk_norm False): a stand-in the kernels do not read
    k_norm: Tensor | None  # None in KV-shared layers
    o: QuantWeight
    post_attention_norm: Tensor | None  # None: the block ends in a plain residual add
    ffn_norm: Tensor
    gate_up: list[Fused]  # gate|up as one matrix (one GLU dispatch) where their types allow
    down: QuantWeight
    post_ffw_norm: Tensor | None
    qk_norm: bool = field(default=True, kw_only=True)
    qkv_bias: list[Tensor | None] = field(default_factory=list, kw_only=True)  # per qkv matrix: its biases (Qwen 2)
    recurrent: object = field(default=None, kw_only=True)  # a recurrent layer's own tensors (its family's type)


PerRow = dict[str, Tensor]  # a family's per-step tensors with a row per token (gathered with the stream)


class Decoder:
    """A decoder's weights on the GPU and the programs that run its steps."""

    architecture: ClassVar[str]
    # Whether gpu/ops/blocks.py may run the block boundaries in their fused forms (see its docstring)
    fusable: ClassVar[bool] = True
    # Whether the file's q/k rows are in llama.cpp's interleaved-RoPE order (LLAMA_ROPE_TYPE_NORM: its converter
    # permutes them for the llama architectures); the step rotates NeoX's halves, so they are reordered at load.
    rope_interleaved: ClassVar[bool] = False
    # The final norm's tensor (LFM2's converter writes it as token_embd_norm)
    output_norm_tensor: ClassVar[MODEL_TENSOR] = T.OUTPUT_NORM
    # The feed-forward's pre-norm tensor (Qwen3.5's converter writes it as post_attention_norm)
    ffn_norm_tensor: ClassVar[MODEL_TENSOR] = T.FFN_NORM

    def __init__(self, executor: Executor, f: GGUFFile, n_ctx: int, progress: Progress | None = None) -> None:
        self.executor = executor
        self.config = c = self.read_config(f)
        self.n_ctx = n_ctx
        self._stand_ins: dict[int, Tensor] = {}
        self._rope_none: dict[str, Tensor] = {}
        source = GGUFSource(f)
        up = Uploader(executor, source.total_bytes, progress)
        self.token_embd = self._matrix(source, up, tensor_name(T.TOKEN_EMBD))
        self.output_norm = self._vector(source, up, tensor_name(self.output_norm_tensor))
        output = tensor_name(T.OUTPUT)
        self.output = self._matrix(source, up, output) if source.has(output) else self.token_embd
        self.load_globals(source, up)
        self.layers = [self.load_layer(source, up, i) for i in range(c.n_layers)]
        self.weight_bytes = up.uploaded_bytes
        # the KV pool holds a cache per attention layer that writes one, in layer order: layer -> its index there
        self._pool_index = {layer: j for j, layer in enumerate(
            i for i in range(c.n_layers) if c.attention(i) and not c.shared(i))}
        # and a state per recurrent layer (pool.recurrent): layer -> its index there
        self._state_index = {layer: j for j, layer in enumerate(i for i in range(c.n_layers) if not c.attention(i))}
        self.rope = {sliding: self._rope(source, sliding) for sliding in (True, False)}

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        """The family's config from the file's metadata."""
        raise NotImplementedError

    # -- loading ------------------------------------------------------------------------------------------------

    @staticmethod
    def _matrix(source: GGUFSource, up: Uploader, name: str) -> QuantWeight:
        return up.matrix(name, source.matrix(name))

    @staticmethod
    def _vector(source: GGUFSource, up: Uploader, name: str) -> Tensor:
        return up.vector(name, source.array(name))

    def load_globals(self, source: GGUFSource, up: Uploader) -> None:
        """Hook: tensors outside the layers beyond the embedding, output norm and head."""

    def load_layer(self, source: GGUFSource, up: Uploader, i: int) -> LayerWeights:
        """Layer i's block tensors (a family with more per layer extends them). What a network lacks is read off
        the file: q/k norms, post-norms, q/k/v biases; a pre-fused attn_qkv or gate|up (ffn_up of 2F rows, no
        ffn_gate) is taken as it is."""
        c = self.config
        shared = c.shared(i)

        def vector(kind: MODEL_TENSOR) -> Tensor:
            return self._vector(source, up, tensor_name(kind, i))

        def optional(kind: MODEL_TENSOR) -> Tensor | None:
            return vector(kind) if source.has(tensor_name(kind, i)) else None

        post_attention_norm = None if self.ffn_norm_tensor == T.ATTN_POST_NORM else optional(T.ATTN_POST_NORM)

        def fused(names: list[str]) -> list[Fused]:
            return up.fused([(n, self._layer_matrix(source, n, i)) for n in names])

        def gate_up() -> list[Fused]:
            if source.has(tensor_name(T.FFN_GATE, i)):
                return fused([tensor_name(T.FFN_GATE, i), tensor_name(T.FFN_UP, i)])
            # gate|up already one matrix (Phi-3's ffn_up of 2F rows)
            return [Fused(self._matrix(source, up, tensor_name(T.FFN_UP, i)), [0, c.d_ffn[i]])]

        if not c.attention(i):
            inputs, output, own = self.load_recurrent(source, up, i)
            return LayerWeights(
                attn_norm=vector(T.ATTN_NORM), qkv=inputs, q_norm=self._no_norm(c.d_model), k_norm=None, o=output,
                post_attention_norm=post_attention_norm, ffn_norm=vector(self.ffn_norm_tensor), gate_up=gate_up(),
                down=self._matrix(source, up, tensor_name(T.FFN_DOWN, i)), post_ffw_norm=optional(T.FFN_POST_NORM),
                qk_norm=False, recurrent=own)

        widths = [c.q_width(i), c.kv_width(i), c.kv_width(i)]
        if source.has(tensor_name(T.ATTN_QKV, i)):  # Phi-3: one matrix in the file
            qkv = [Fused(self._matrix(source, up, tensor_name(T.ATTN_QKV, i)), [0, widths[0], widths[0] + widths[1]])]
            bias_names = [[tensor_name(T.ATTN_QKV, i, "bias")]]
        else:
            names = [tensor_name(T.ATTN_Q, i)]
            if not shared:
                names.append(tensor_name(T.ATTN_K, i))
                if source.has(tensor_name(T.ATTN_V, i)):
                    names.append(tensor_name(T.ATTN_V, i))  # absent where V is K (attention_k_eq_v)
            named = [(n, self._layer_matrix(source, n, i)) for n in names]
            if c.attn_output_gate:  # a fourth part: the gate rows of attn_q (_layer_matrix took its query rows)
                gate = tensor_name(T.ATTN_Q, i, "gate")
                names.append(gate)
                named.append((gate, self._output_gate(source, i)))
            qkv = up.fused(named)
            bias_names, at = [], 0
            for f in qkv:  # each fused matrix's parts, in order
                bias_names.append([n.removesuffix("weight") + "bias" for n in names[at:at + len(f.parts)]])
                at += len(f.parts)
        qkv_bias = [self._bias(source, up, names, f.weight.n) for names, f in zip(bias_names, qkv)]
        qk_norm = source.has(tensor_name(T.ATTN_Q_NORM, i))
        if qk_norm:
            q_norm = self._head_vector(source, up, tensor_name(T.ATTN_Q_NORM, i), i)
            k_norm = None if shared else self._head_vector(source, up, tensor_name(T.ATTN_K_NORM, i), i)
        else:  # the kernels take norm weights they do not read
            q_norm = k_norm = self._no_norm(c.head_dims[i])
        ffn = gate_up()
        return LayerWeights(
            attn_norm=vector(T.ATTN_NORM),
            qkv=qkv,
            q_norm=q_norm,
            k_norm=k_norm,
            o=self._matrix(source, up, tensor_name(T.ATTN_OUT, i)),
            post_attention_norm=post_attention_norm,
            ffn_norm=vector(self.ffn_norm_tensor),
            gate_up=ffn,
            down=self._matrix(source, up, tensor_name(T.FFN_DOWN, i)),
            post_ffw_norm=optional(T.FFN_POST_NORM),
            qk_norm=qk_norm,
            qkv_bias=qkv_bias,
        )

    def load_recurrent(self, source: GGUFSource, up: Uploader, i: int) -> tuple[list[Fused], QuantWeight, object]:
        """Hook: a recurrent layer's tensors: its input projections (the products of its normalised input, as the
        step reads them), its output projection (added to the residual as attention's is) and its own others."""
        raise NotImplementedError(f"{self.architecture} has no recurrent layers")

    def recurrent_states(self) -> list[RecurrentLayerState]:
        """Hook: the per-sequence state shapes of the recurrent layers, in layer order."""
        return []

    def recurrent_mixer(self, b: ProgramBuilder, pool: KVPool, w: LayerWeights, i: int, h: BlockInput, rows: Tensor,
                        t_max: int, *, prompt: bool) -> Tensor:
        """Hook: a recurrent layer's output [T, D] before its output projection, from its normalised input h, reading
        and moving on each sequence's state in pool.recurrent (its index there: self._state_index[i]). prompt: rows of
        prompt chunks, else decode rows (one per sequence)."""
        raise NotImplementedError(f"{self.architecture} has no recurrent layers")

    def _layer_matrix(self, source: GGUFSource, name: str, i: int) -> Matrix:
        """A layer's matrix as the step reads it: q and k rows from llama.cpp's interleaved-RoPE order back in
        NeoX's halves where the family's converter permuted them (rope_interleaved); a partial rotary's dims where
        the step's rotation pairs them (rope_dims, head_order); q's query rows alone where attn_q also holds each
        head's output gate (attn_output_gate)."""
        m = source.matrix(name)
        c = self.config
        is_q, is_k = name == tensor_name(T.ATTN_Q, i), name == tensor_name(T.ATTN_K, i)
        if not (is_q or is_k):
            return m
        heads, head_dim = (c.n_heads if is_q else c.kv_heads[i]), c.head_dims[i]
        rows = np.arange(m.n)
        if is_q and c.attn_output_gate:
            rows = _query_gate_rows(heads, head_dim, m.n)[0]
        if self.rope_interleaved:
            rows = rows[neox_rows(heads, head_dim)]
        elif c.rope_dims:
            rows = rows[_head_rows(heads, head_order(head_dim, c.rope_dims))]
        if len(rows) != m.n or np.any(rows != np.arange(m.n)):
            m = m._replace(n=len(rows), data=np.asarray(m.data).reshape(m.n, -1)[rows])
        return m

    def _output_gate(self, source: GGUFSource, i: int) -> Matrix:
        """The output gate's rows of attn_q, where each head's query rows are followed by its gate's."""
        m = source.matrix(tensor_name(T.ATTN_Q, i))
        rows = _query_gate_rows(self.config.n_heads, self.config.head_dims[i], m.n)[1]
        return m._replace(n=len(rows), data=np.asarray(m.data).reshape(m.n, -1)[rows])

    def _head_vector(self, source: GGUFSource, up: Uploader, name: str, i: int) -> Tensor:
        """A per-head-dim weight (q/k norms) in the order _layer_matrix gives q's and k's dims."""
        values = source.array(name)
        if self.config.rope_dims and not self.rope_interleaved:
            values = values.reshape(-1)[head_order(self.config.head_dims[i], self.config.rope_dims)]
        return up.vector(name, values)

    def _bias(self, source: GGUFSource, up: Uploader, names: list[str], n: int) -> Tensor | None:
        """The biases of a fused matrix's parts as one vector of its n rows, or None where it has none."""
        if not any(source.has(name) for name in names):
            return None
        if not all(source.has(name) for name in names):
            raise GGUFFormatError(f"biases for some of {names} only")
        values = np.concatenate([source.array(name).reshape(-1) for name in names])
        if values.size != n:
            raise GGUFFormatError(f"{names}: {values.size} biases for {n} rows")
        return up.vector(names[0].rsplit(".", 2)[0] + ".qkv_bias", values)

    def _no_norm(self, width: int) -> Tensor:
        """A stand-in norm weight for kernels that take one they do not read (one per width, shared)."""
        if width not in self._stand_ins:
            self._stand_ins[width] = self.executor.tensor(f"no_norm{width}", (width,), data=np.ones(width, np.float32))
        return self._stand_ins[width]

    def _rope(self, source: GGUFSource, sliding: bool) -> Tensor:
        """The RoPE table of a layer kind: full layers with the file's frequency factors (rope_freqs), if any; a
        partial rotary's turned pairs first and the rest unturned (rope_dims)."""
        c, n = self.config, self.n_ctx
        dim = next((d for d, s in zip(c.head_dims, c.sliding) if s == sliding), c.head_dims[0])
        factors_name = tensor_name(T.ROPE_FREQS)
        if c.rope_dims:
            turned = rope_table(c.rope_dims, n, c.rope_base_swa if sliding else c.rope_base_full, c.rope_scale_full)
            unturned = np.zeros((n, (dim - c.rope_dims) // 2, 2), np.float32)
            unturned[..., 0] = 1.0  # cos 1, sin 0
            table = np.concatenate([turned, unturned], axis=1)
        elif sliding:
            table = rope_table(dim, n, c.rope_base_swa)
        elif source.has(factors_name):
            table = rope_table_factors(dim, n, c.rope_base_full, source.array(factors_name))
        else:
            table = rope_table(dim, n, c.rope_base_full, c.rope_scale_full)
        return self.executor.tensor("rope_swa" if sliding else "rope_full", (n, dim), data=table)

    def rope_of(self, i: int) -> Tensor:
        """Layer i's RoPE table: its kind's, or one that leaves every pair unrotated (no_rope layers)."""
        c = self.config
        if c.no_rope and c.no_rope[i]:
            if "none" not in self._rope_none:
                table = np.zeros((self.n_ctx, c.head_dims[i] // 2, 2), np.float32)
                table[..., 0] = 1.0  # cos 1, sin 0
                self._rope_none["none"] = self.executor.tensor("rope_none", (self.n_ctx, c.head_dims[i]), data=table)
            return self._rope_none["none"]
        return self.rope[c.sliding[i]]

    def new_pool(self, kv_dtype: str, n_ctx: int, pool_tokens: int, n_slots: int, page_tokens: int) -> KVPool:
        """Caches for the layers that write one (KV-shared layers read an earlier layer's)."""
        widths = [self.config.kv_width(i) for i in self._pool_index]
        pool = KVPool(self.executor, f"kv_{kv_dtype}", widths, min(n_ctx, self.n_ctx), pool_tokens, n_slots,
                      kv_dtype, page_tokens)
        states = self.recurrent_states()
        if states:  # the recurrent layers' state, one row per slot of the pool
            pool.recurrent = RecurrentStatePool(self.executor, f"state_{kv_dtype}", states, n_slots)
        return pool

    # -- the step -----------------------------------------------------------------------------------------------

    def build_step(self, pool: KVPool, io: StepIO, t_max: int, r_max: int, masked: bool = False,
                   sample: bool = True) -> Program:
        """Record the step program for up to t_max token rows (of any sequences in the pool), of
        which up to r_max reach the output head and the sampler. masked: the rows flagged constrained in
        their sampling params have their logits masked by their token mask first (constrained decoding).
        sample=False: the step ends with the logits (step_io.sample_tokens samples them in a later program)."""
        c = self.config
        tail = ("m" if masked else "") if sample else "l"
        b = ProgramBuilder(self.executor, f"{self.architecture}.t{t_max}r{r_max}{tail}")
        rows = io.rows
        x = b.activation("x", (t_max, c.d_model))  # residual stream
        embedding(b, self.token_embd, io.ids, x, t_max, scale=c.embed_scale, rows=rows, slot_tokens=io.slot_tokens,
                  images=io.images)
        per_row = self.begin_step(b, io, x, t_max)
        h: BlockInput = b.activation("h0", (t_max, c.d_model))  # the next block's normalised input
        ops.rms_norm(b, x, self.layers[0].attn_norm, h, c.eps)
        post_norms = any(w.post_attention_norm is not None or w.post_ffw_norm is not None for w in self.layers)
        residual = Residual(b, x, c.eps, t_max, fusable=self.fusable, post_norms=post_norms)
        for i, w in enumerate(self.layers):
            t = residual.t_max
            if c.shared(i) and t > r_max:  # KV-shared layers write no cache: only the output rows matter now
                assert isinstance(h, Tensor)
                x, h = (_gather(b, io, v, r_max, f"{name}_out") for v, name in ((residual.x, "x"), (h, "h")))
                per_row = {name: _gather(b, io, v, r_max, f"{name}_out") for name, v in per_row.items()}
                rows = _gather(b, io, rows, r_max, "rows_out")
                residual.gather(x, r_max)
                t = r_max
            sliding = c.sliding[i]
            if not c.attention(i):
                a = self.recurrent_mixer(b, pool, w, i, h, rows, t, prompt=t > r_max)
            else:
                a = blocks.attention(
                    b, w.qkv, h, w.q_norm, w.k_norm, self.rope_of(i), pool, self._pool_index[c.cache_layer(i)], rows,
                    t, str(i), prompt=t > r_max, heads=c.n_heads, kv_heads=c.kv_heads[i], head_dim=c.head_dims[i],
                    window=c.window if sliding else 0, scale=c.query_scale, eps=c.eps, v_norm=c.v_norm,
                    stack=self.fusable, qk_norm=w.qk_norm, biases=w.qkv_bias, softcap=c.attn_softcap,
                    output_gate=c.attn_output_gate,
                    later_keys=sliding or not c.images_both_ways_sliding_only)
            o = residual.output(w.o, a, f"o{i}")
            h2 = residual.add_norm(o, w.post_attention_norm, w.ffn_norm, w.gate_up, f"h2_{i}", gated=True)
            y = self.feed_forward(b, w, i, h2, residual)
            h = self.block_output(b, io, w, i, y, residual, per_row, r_max)
        out = io.outputs(r_max)
        assert isinstance(h, Tensor)
        linear(b, self.output, h, out.logits, r_max)
        if c.softcap:
            ops.softcap(b, out.logits, c.softcap)
        if sample:
            sample_tokens(b, io, r_max, masked)
        return b.build()

    def next_norm(self, i: int) -> Tensor:
        """The norm after layer i: the next layer's attention norm, or the output norm after the last."""
        return self.output_norm if i + 1 == self.config.n_layers else self.layers[i + 1].attn_norm

    def begin_step(self, b: ProgramBuilder, io: StepIO, x: Tensor, t_max: int) -> PerRow:
        """Hook: a family's per-step tensors, computed from the embedded tokens x before the first block."""
        return {}

    def feed_forward(self, b: ProgramBuilder, w: LayerWeights, i: int, h: BlockInput, residual: Residual,
                     ) -> BlockOutput:
        """Hook: the block's feed-forward output before its post-norm; the gated MLP by default."""
        return blocks.gated_feed_forward(b, w.gate_up, w.down, h, residual, str(i), self.config.activation)

    def block_output(self, b: ProgramBuilder, io: StepIO, w: LayerWeights, i: int, y: BlockOutput,
                     residual: Residual, per_row: PerRow, r_max: int) -> BlockInput:
        """Hook: x += rms_norm(y) * post_ffw_norm, and the next block's input (after the last block: the output
        rows' final norm, the head's input)."""
        if i + 1 == self.config.n_layers:  # only each sequence's last token reaches the output head
            return residual.add_norm_rows(y, w.post_ffw_norm, self.output_norm, io.out_rows, r_max, "last")
        following = self.layers[i + 1]
        return residual.add_norm(y, w.post_ffw_norm, following.attn_norm, following.qkv, f"h{i + 1}")


def _gather(b: ProgramBuilder, io: StepIO, src: Tensor, r_max: int, name: str) -> Tensor:
    """The output rows of src (each sequence's last token), as a tensor of r_max rows."""
    dst = b.activation(name, (r_max, *src.shape[1:]), src.dtype)
    ops.gather_rows(b, src, io.out_rows, dst)
    return dst


def rope_table_factors(head_dim: int, n_ctx: int, base: float, factors: np.ndarray) -> np.ndarray:
    """rope_table with llama.cpp's frequency factors: pair i turns at base^(-2i/head_dim) / factors[i] (factors of
    1e30 leave a pair unrotated: proportional RoPE)."""
    if factors.size != head_dim // 2:
        raise GGUFFormatError(f"rope_freqs has {factors.size} factors for a head of {head_dim}")
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(base), exponent, dtype=np.float32)).astype(np.float32)
    inv_freq = (inv_freq / factors.astype(np.float32)).astype(np.float32)
    angles = (np.arange(n_ctx, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    return np.stack([np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))], -1).astype(np.float32)


def head_order(head_dim: int, rope_dims: int) -> np.ndarray:
    """The order of a head's dims that puts a partial rotary's pairs (i, i + R/2), i < R/2, where the step's NeoX
    rotation pairs dims (i, i + Dh/2), and the R.. dims it leaves alone in the pairs past R/2 (which the RoPE table
    turns by 0). q and k get the same order, so their dot products, and attention, are unchanged."""
    if rope_dims % 2 or head_dim % 2 or not 0 < rope_dims <= head_dim:
        raise GGUFFormatError(f"a rotary of {rope_dims} dims in a head of {head_dim}")
    half, turned = head_dim // 2, rope_dims // 2
    rest = np.arange(rope_dims, head_dim)
    return np.concatenate([np.arange(turned), rest[:half - turned], np.arange(turned, rope_dims),
                           rest[half - turned:]])


def _head_rows(heads: int, order: np.ndarray) -> np.ndarray:
    """A per-head order of dims applied to every head of a projection's rows."""
    return (np.arange(heads)[:, None] * len(order) + order[None, :]).reshape(-1)


def _query_gate_rows(heads: int, head_dim: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """attn_q's query rows and its output gate's rows, where each head's query rows are followed by its gate's
    (transformers' Qwen3.5 q_proj viewed as [heads, 2 Dh])."""
    if n != 2 * heads * head_dim:
        raise GGUFFormatError(f"attn_q has {n} rows, not {heads} heads of a query and a gate of {head_dim}")
    order = np.arange(2 * heads * head_dim).reshape(heads, 2, head_dim)
    return order[:, 0].reshape(-1), order[:, 1].reshape(-1)


def neox_rows(heads: int, head_dim: int) -> np.ndarray:
    """The row order that undoes llama.cpp's q/k permutation: row j of a head in NeoX order (dims i and i + Dh/2
    rotate together) is the file's row 2 (j mod Dh/2) + j div (Dh/2), where pairs are adjacent."""
    half = head_dim // 2
    j = np.arange(head_dim)
    within = 2 * (j % half) + j // half
    return (np.arange(heads)[:, None] * head_dim + within[None, :]).reshape(-1)
