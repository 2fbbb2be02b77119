"""Gemma 4 (text) on the executor, from a GGUF in llama.cpp's layout or Ollama's.

One step, for T tokens at positions pos..pos+T-1 (rows of any sequences, see models/step_io.py):

    x = embed(ids) * sqrt(D)                                            # x: [T, D]
    pli = (rms_norm(x Wple * D^-0.5) * ple_norm + embed_pl(ids) * sqrt(P)) / sqrt(2)   # PLE: [T, L, P]
    for each layer i (sliding or full attention, each with its own head_dim Dh_i and KV heads):
        h = rms_norm(x) * attn_norm
        q = rope(rms_norm(h Wq) * q_norm)                                # scale 1: the norms set it
        unless KV-shared: k = h Wk; v = h Wv (or k itself, attention_k_eq_v on full layers)
            cache[pos] = rope(rms_norm(k) * k_norm), rms_norm(v)          # v's norm has no weight
        a = attention(q, cache of layer i, or of the last unshared layer of its kind when KV-shared)
        x += rms_norm(a Wo) * post_attention_norm
        h = rms_norm(x) * ffn_norm
        y = (gelu_tanh(h Wgate) * h Wup) Wdown                            # double-wide in shared layers
        MoE layers: y = rms_norm(y) * post_ffw_norm_1
                      + rms_norm(sum_e w_e (gelu(h2 Wg_e) * h2 Wu_e) Wd_e) * post_ffw_norm_2
                    with h2 = rms_norm(x) * pre_ffw_norm_2 and w from the router on rms_norm(x)
        x += rms_norm(y) * post_ffw_norm
        PLE: x += rms_norm((gelu_tanh(x Wgate_pl) * pli[:, i]) Wproj) * post_norm
        x *= layer_output_scale
    logits = softcap(rms_norm(x[last]) * output_norm E^T, 30)            # tied head
    next = sample(logits)

A prompt chunk carries only each sequence's last row from the first KV-shared layer on: those layers write
no cache, so the other rows would feed nothing (as transformers slices them).

Full-attention layers rotate only part of their dims (proportional RoPE): the file's rope_freqs holds a
factor per pair (1, or 1e30 for pairs left unrotated) dividing the frequencies base^(-2i/Dh) (llama.cpp).
MoE reads only the chosen experts' rows (kernels/moe_matvec.wgsl) where each expert tensor fits one binding;
otherwise every expert runs on every token through the ordinary matrix products, weighted by the router (0
for experts not chosen), which costs experts / top_k times the work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from gguf import MODEL_TENSOR, GGUFReader, Keys, TokenType

from gpu.kv_cache import KVPool, rope_table
from gpu.ops import gemma4 as g4
from gpu.ops import transformer as ops
from gpu.ops.attention_prompt import attention_prompt
from gpu.ops.matmul import (
    QuantisedActivation,
    embedding,
    linear,
    linear_glu,
    quantised_activation,
    quantises_ffn_input,
    quantises_glu_output,
)
from gpu.ops.sampling import gumbel_sample as sample
from gpu.program import Executor, Program, ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.chat_template import GEMMA4_TEMPLATE
from models.gemma4_weights import WeightLoader
from models.gemma4_weights import tensor_name as _name
from models.gguf_file import GGUFFile, GGUFFormatError
from models.step_io import StepIO
from models.tokenizer import Tokenizer, read_gguf_vocab

Progress = Callable[[int, int], None]
T = MODEL_TENSOR
SOFTCAP = 30.0  # final logit softcap of the Gemma 4 checkpoints (HF config final_logit_softcapping)
# Pieces llama.cpp's converter makes user-defined (always rendered) so a chat parser sees them
VISIBLE_PIECES = frozenset({"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>'})


@dataclass(frozen=True)
class Gemma4Config:
    n_layers: int
    d_model: int  # D
    n_heads: int  # H
    head_dims: tuple[int, ...]  # Dh per layer: key_length_swa on sliding layers, key_length on full ones
    kv_heads: tuple[int, ...]  # per layer
    d_ffn: tuple[int, ...]  # per layer (twice as wide in KV-shared layers with the double-wide MLP)
    sliding: tuple[bool, ...]
    eps: float
    window: int
    n_shared_kv: int  # the last n_shared_kv layers reuse the cache of an earlier layer of their kind
    d_ple: int  # P: per-layer input width, 0 without PLE
    rope_base_full: float
    rope_base_swa: float
    softcap: float  # final logit softcap, 0 = none
    n_experts: int
    n_experts_used: int
    n_ctx_train: int
    vocab_size: int

    def q_width(self, i: int) -> int:
        return self.n_heads * self.head_dims[i]

    def kv_width(self, i: int) -> int:
        return self.kv_heads[i] * self.head_dims[i]

    def shared(self, i: int) -> bool:
        return i >= self.n_layers - self.n_shared_kv

    def cache_layer(self, i: int) -> int:
        """The layer whose cache layer i attends over: its own, or (KV-shared) the last unshared one of its kind."""
        if not self.shared(i):
            return i
        first = self.n_layers - self.n_shared_kv
        return max(j for j in range(first) if self.sliding[j] == self.sliding[i])

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> Gemma4Config:
        _, embd_shape, _ = f.raw(_name(T.TOKEN_EMBD))
        n = int(f.value(Keys.LLM.BLOCK_COUNT))
        per_layer = lambda key, default=...: _per_layer(f.value(key, default), n)  # noqa: E731
        pattern = f.value(Keys.Attention.SLIDING_WINDOW_PATTERN, None)
        if pattern is None:  # HF's default: 5 sliding layers to 1 full, the last one full
            pattern = [(i + 1) % 6 != 0 and i != n - 1 for i in range(n)]
        elif isinstance(pattern, int):  # a period, as Gemma 3's files write it: every pattern-th layer is full
            pattern = [(i + 1) % pattern != 0 for i in range(n)]
        sliding = tuple(bool(s) for s in _per_layer(pattern, n))
        full_dim = int(f.value(Keys.Attention.KEY_LENGTH))
        swa_dim = int(f.value(Keys.Attention.KEY_LENGTH_SWA, full_dim))
        n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
        return cls(
            n_layers=n,
            d_model=int(f.value(Keys.LLM.EMBEDDING_LENGTH)),
            n_heads=n_heads,
            head_dims=tuple(swa_dim if s else full_dim for s in sliding),
            kv_heads=tuple(int(v) for v in per_layer(Keys.Attention.HEAD_COUNT_KV, n_heads)),
            d_ffn=tuple(int(v) for v in per_layer(Keys.LLM.FEED_FORWARD_LENGTH)),
            sliding=sliding,
            eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6)),
            window=int(f.value(Keys.Attention.SLIDING_WINDOW, 512)),
            n_shared_kv=int(f.value(Keys.Attention.SHARED_KV_LAYERS, 0)),
            d_ple=int(f.value(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, 0)),
            rope_base_full=float(f.value(Keys.Rope.FREQ_BASE, 1_000_000.0)),
            rope_base_swa=float(f.value(Keys.Rope.FREQ_BASE_SWA, 10_000.0)),
            # every published Gemma 4 caps at 30; a converter that leaves the key out means the model's own 30
            softcap=float(f.value(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, SOFTCAP)),
            n_experts=int(f.value(Keys.LLM.EXPERT_COUNT, 0)),
            n_experts_used=int(f.value(Keys.LLM.EXPERT_USED_COUNT, 0)),
            n_ctx_train=int(f.value(Keys.LLM.CONTEXT_LENGTH)),
            vocab_size=int(embd_shape[1]),
        )


def _per_layer(value: object, n: int) -> list:
    """A per-layer metadata value: an array of n, or one scalar for every layer."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise GGUFFormatError(f"a per-layer array has {len(value)} values for {n} layers")
        return list(value)
    return [value] * n


@dataclass
class Moe:
    router: QuantWeight  # [E, D] router projection
    router_norm: Tensor  # [D] the router's input scale times D^-0.5 (applied as a norm weight)
    expert_scale: Tensor  # [E]
    pre_norm: Tensor  # [D] pre_ffw_norm_2
    gate_up: QuantWeight  # [E * 2I, D]: each expert's I gate rows then its I up rows
    down: QuantWeight  # sparse: [E * D, I], each expert's rows; dense: [D, E * I], the experts side by side
    sparse: bool  # the chosen experts only (moe_matvec), or all of them weighted (the dense products)
    post_norm_1: Tensor  # [D] on the dense MLP's output
    post_norm_2: Tensor  # [D] on the experts' output


@dataclass
class LayerWeights:
    attn_norm: Tensor
    qkv: list[tuple[QuantWeight, list[int]]]  # fused projections and the first column of each part
    q_norm: Tensor
    k_norm: Tensor | None  # None in KV-shared layers
    o: QuantWeight
    post_attention_norm: Tensor
    ffn_norm: Tensor
    gate_up: list[tuple[QuantWeight, list[int]]]
    down: QuantWeight
    post_ffw_norm: Tensor
    out_scale: Tensor  # [1] layer_output_scale
    moe: Moe | None
    ple_gate: QuantWeight | None  # [P, D]
    ple_proj: QuantWeight | None  # [D, P]
    ple_post_norm: Tensor | None


class Gemma4:
    """Gemma 4's weights on the GPU and the programs that run its steps."""

    architecture = "gemma4"
    sparse_moe = True  # run only the chosen experts where their tensors fit a binding (tests turn it off)

    def __init__(self, executor: Executor, f: GGUFFile, n_ctx: int, progress: Progress | None = None) -> None:
        self.executor = executor
        self.config = c = Gemma4Config.from_gguf(f)
        self.n_ctx = n_ctx
        w = WeightLoader(executor, f, progress)
        self.token_embd = w.matrix(_name(T.TOKEN_EMBD))
        self.output_norm = w.vector(_name(T.OUTPUT_NORM))
        self.output = w.matrix(_name(T.OUTPUT)) if _name(T.OUTPUT) in f.tensors else self.token_embd
        if c.d_ple:
            self.ple_embd = w.matrix(_name(T.PER_LAYER_TOKEN_EMBD))
            self.ple_model_proj = w.matrix(_name(T.PER_LAYER_MODEL_PROJ))
            self.ple_proj_norm = w.vector(_name(T.PER_LAYER_PROJ_NORM))
        self.layers = [self._layer(w, f, i) for i in range(c.n_layers)]
        self.weight_bytes = w.uploaded_bytes
        # the KV pool holds a cache per layer that writes one, in layer order: layer -> its index there
        unshared = [i for i in range(c.n_layers) if not c.shared(i)]
        self._pool_index = {layer: j for j, layer in enumerate(unshared)}
        swa_dim = next((d for d, s in zip(c.head_dims, c.sliding) if s), c.head_dims[0])
        full_dim = next((d for d, s in zip(c.head_dims, c.sliding) if not s), c.head_dims[0])
        factors = f.f32(_name(T.ROPE_FREQS)) if _name(T.ROPE_FREQS) in f.tensors else None
        self.rope_swa = executor.tensor("rope_swa", (n_ctx, swa_dim), data=rope_table(swa_dim, n_ctx, c.rope_base_swa))
        self.rope_full = executor.tensor("rope_full", (n_ctx, full_dim),
                                         data=_rope_table_factors(full_dim, n_ctx, c.rope_base_full, factors))

    @staticmethod
    def load_tokenizer(reader: GGUFReader) -> Tokenizer:
        """The file's tokenizer. Ollama's blobs say "llama" (SentencePiece) with pre "gemma4" and merges, but
        Gemma 4's vocabulary is BPE: read them as llama.cpp's "gemma4" model, as Ollama's llama.cpp shim does."""
        vocab = read_gguf_vocab(reader)
        if vocab.model == "llama" and vocab.pre == "gemma4" and vocab.merges:
            vocab = replace(vocab, model="gemma4", add_bos=True, add_space_prefix=False)
        # the thinking and tool markers stay visible in decoded text, so the chat parser can read them (as
        # llama.cpp's converter marks them); a file without a template (Ollama's) gets Gemma 4's turn format
        types = vocab.types.copy()
        for i, piece in enumerate(vocab.tokens):
            if piece in VISIBLE_PIECES:
                types[i] = TokenType.USER_DEFINED
        return Tokenizer(replace(vocab, types=types, chat_template=vocab.chat_template or GEMMA4_TEMPLATE))

    def _layer(self, w: WeightLoader, f: GGUFFile, i: int) -> LayerWeights:
        c = self.config
        shared = c.shared(i)
        names = [_name(T.ATTN_Q, i)]
        if not shared:
            names.append(_name(T.ATTN_K, i))
            if _name(T.ATTN_V, i) in f.tensors:
                names.append(_name(T.ATTN_V, i))  # absent on attention_k_eq_v's full layers: V is K
        scale_name = _name(T.LAYER_OUT_SCALE, i)
        moe = None
        if c.n_experts:
            router_scale = f.f32(_name(T.FFN_GATE_INP, i, "scale")) * np.float32(c.d_model ** -0.5)
            expert_scale = _name(T.FFN_DOWN_EXP, i, "scale")
            if expert_scale not in f.tensors:  # older Ollama blobs
                expert_scale = _name(T.FFN_GATE_INP, i, "per_expert_scale")
            sparse = self.sparse_moe and w.experts_fit_one_binding(i)
            moe = Moe(router=w.matrix(_name(T.FFN_GATE_INP, i)), router_norm=w.array(f"router_norm.{i}", router_scale),
                      expert_scale=w.vector(expert_scale), pre_norm=w.vector(_name(T.FFN_PRE_NORM_2, i)),
                      gate_up=w.experts_gate_up(i), down=w.experts_down(i, sparse), sparse=sparse,
                      post_norm_1=w.vector(_name(T.FFN_POST_NORM_1, i)),
                      post_norm_2=w.vector(_name(T.FFN_POST_NORM_2, i)))
        return LayerWeights(
            attn_norm=w.vector(_name(T.ATTN_NORM, i)),
            qkv=w.fused(names),
            q_norm=w.vector(_name(T.ATTN_Q_NORM, i)),
            k_norm=None if shared else w.vector(_name(T.ATTN_K_NORM, i)),
            o=w.matrix(_name(T.ATTN_OUT, i)),
            post_attention_norm=w.vector(_name(T.ATTN_POST_NORM, i)),
            ffn_norm=w.vector(_name(T.FFN_NORM, i)),
            gate_up=w.fused([_name(T.FFN_GATE, i), _name(T.FFN_UP, i)]),
            down=w.matrix(_name(T.FFN_DOWN, i)),
            post_ffw_norm=w.vector(_name(T.FFN_POST_NORM, i)),
            out_scale=w.vector(scale_name) if scale_name in f.tensors else w.array(f"out_scale.{i}", np.ones(1)),
            moe=moe,
            ple_gate=w.matrix(_name(T.PER_LAYER_INP_GATE, i)) if c.d_ple else None,
            ple_proj=w.matrix(_name(T.PER_LAYER_PROJ, i)) if c.d_ple else None,
            ple_post_norm=w.vector(_name(T.PER_LAYER_POST_NORM, i)) if c.d_ple else None,
        )

    def new_pool(self, kv_dtype: str, n_ctx: int, pool_tokens: int, n_slots: int, page_tokens: int) -> KVPool:
        """Caches for the layers that write one (KV-shared layers read an earlier layer's)."""
        c = self.config
        widths = [c.kv_width(i) for i in self._pool_index]
        return KVPool(self.executor, f"kv_{kv_dtype}", widths, min(n_ctx, self.n_ctx), pool_tokens, n_slots,
                      kv_dtype, page_tokens)

    def build_step(self, pool: KVPool, io: StepIO, t_max: int, r_max: int) -> Program:
        """Record the step program for up to t_max token rows (of any sequences in the pool), of
        which up to r_max reach the output head and the sampler."""
        c = self.config
        b = ProgramBuilder(self.executor, f"gemma4.t{t_max}r{r_max}")
        rows = io.rows
        x = b.activation("x", (t_max, c.d_model))  # residual stream
        embedding(b, self.token_embd, io.ids, x, t_max, scale=math.sqrt(c.d_model), rows=rows,
                  slot_tokens=io.slot_tokens)
        pli = self._per_layer_inputs(b, io, x, t_max) if c.d_ple else None
        h = b.activation("h0", (t_max, c.d_model))  # the next block's normalised input
        ops.rms_norm(b, x, self.layers[0].attn_norm, h, c.eps)
        t = t_max  # token rows the blocks compute
        for i, w in enumerate(self.layers):
            if c.shared(i) and t > r_max:  # KV-shared layers write no cache: only the output rows matter now
                x, h, pli, rows = (self._gather(b, io, v, r_max, f"{name}_out") if v is not None else None
                                   for v, name in ((x, "x"), (h, "h"), (pli, "pli"), (rows, "rows")))
                t = r_max
            a = self._attention(b, w, i, h, pool, rows, t, prompt=t > r_max)
            o = b.activation(f"o{i}", (t, c.d_model))
            linear(b, w.o, a, o, t)
            h2: Tensor | QuantisedActivation
            if len(w.gate_up) == 1 and quantises_ffn_input(b, w.gate_up[0][0], t):
                # int8 activations: normalised and quantised once for an int8 gate-up (as Gemma 3's)
                h2 = quantised_activation(b, f"h2_{i}", t, c.d_model)
            else:
                h2 = b.activation(f"h2_{i}", (t, c.d_model))
            ops.residual_norm(b, o, w.post_attention_norm, x, w.ffn_norm, h2, c.eps)  # x += ..., h2 = norm(x)
            y = self._feed_forward(b, w, i, x, h2, t)
            last = i + 1 == c.n_layers
            next_norm = self.output_norm if last else self.layers[i + 1].attn_norm
            h = b.activation("last" if last else f"h{i + 1}", (r_max if last else t, c.d_model))
            # only each sequence's last token reaches the head (rows already gathered: row r is output r)
            gather = io.out_rows if last and t > r_max else None
            if pli is not None:  # x += post_ffw_norm(y), then the per-layer input's own residual
                # residual_norm's add; its h (a norm of x) is not needed, but its subgroup sums (256 invocations a
                # row then) took 12.8 us a decode row on an H100 where rms_norm's accumulate took 20
                # (bench/results-gpu-h100-gemma4-e2b.json), though it does more (this swap is not measured yet)
                unused = b.activation(f"ple_unused{i}", (t, c.d_model))
                ops.residual_norm(b, y, w.post_ffw_norm, x, w.post_ffw_norm, unused, c.eps)
                gate = b.activation(f"ple_gate{i}", (t, c.d_ple))
                linear(b, w.ple_gate, x, gate, t)
                gated = b.activation(f"ple_act{i}", (t, c.d_ple))
                g4.ple_gelu_mul(b, gate, pli, i, gated)
                y = b.activation(f"ple_out{i}", (t, c.d_model))
                linear(b, w.ple_proj, gated, y, t)
                g4.residual_scale_norm(b, y, w.ple_post_norm, x, w.out_scale, next_norm, h, c.eps, out_rows=gather)
            else:
                g4.residual_scale_norm(b, y, w.post_ffw_norm, x, w.out_scale, next_norm, h, c.eps, out_rows=gather)
        out = io.outputs(r_max)
        linear(b, self.output, h, out.logits, r_max)
        if c.softcap:
            g4.softcap(b, out.logits, c.softcap)
        sample(b, out.logits, out.sampling, out.sampled)
        ops.store_tokens(b, out.sampled, io.out_rows, io.rows, io.slot_tokens)
        return b.build()

    @staticmethod
    def _gather(b: ProgramBuilder, io: StepIO, src: Tensor, r_max: int, name: str) -> Tensor:
        """The output rows of src (each sequence's last token), as a tensor of r_max rows."""
        dst = b.activation(name, (r_max, *src.shape[1:]), src.dtype)
        g4.gather_rows(b, src, io.out_rows, dst)
        return dst

    def _per_layer_inputs(self, b: ProgramBuilder, io: StepIO, x: Tensor, t_max: int) -> Tensor:
        """pli [T, L * P]: each layer's per-layer input (the PLE table's row and a projection of x)."""
        c = self.config
        width = c.n_layers * c.d_ple
        pli = b.activation("pli", (t_max, width))
        embedding(b, self.ple_embd, io.ids, pli, t_max, scale=math.sqrt(c.d_ple), rows=io.rows,
                  slot_tokens=io.slot_tokens)
        proj = b.activation("ple_proj", (t_max, width))
        linear(b, self.ple_model_proj, x, proj, t_max)
        g4.ple_combine(b, proj, self.ple_proj_norm, pli, c.n_layers, c.eps, c.d_model ** -0.5)
        return pli

    def _attention(self, b: ProgramBuilder, w: LayerWeights, i: int, h: Tensor, pool: KVPool, rows: Tensor,
                   t_max: int, prompt: bool) -> Tensor:
        """Attention output [T, H * Dh_i] of layer i; unshared layers append their k, v to the cache first.
        prompt: rows of prompt chunks (the blocked prompt kernel), else decode rows (flash-decoding splits)."""
        c = self.config
        sliding = c.sliding[i]
        rope = self.rope_swa if sliding else self.rope_full
        cols = _projections(b, w.qkv, h, t_max, f"qkv{i}")
        cache = self._pool_index[c.cache_layer(i)]
        if c.shared(i):  # q alone: norm and rope in place
            q_out = cols[0][0]
            ops.norm_rope(b, q_out, w.q_norm, rope, rows, c.n_heads, c.eps)
        else:
            q_out = b.activation(f"q{i}", (t_max, c.q_width(i)))
            q, k = cols[0], cols[1]
            v = cols[2] if len(cols) > 2 else k  # attention_k_eq_v: V is K before its norm and rope
            ops.qk_norm_rope_store(b, q, k, v, w.q_norm, w.k_norm, rope, pool, cache, rows, q_out,
                                   heads=c.n_heads, kv_heads=c.kv_heads[i], eps=c.eps, v_norm=True)
        a = b.activation(f"attn{i}", (t_max, c.q_width(i)))
        attend = attention_prompt if prompt else ops.attention
        attend(b, q_out, pool, cache, rows, a, heads=c.n_heads, kv_heads=c.kv_heads[i],
               head_dim=c.head_dims[i], window=c.window if sliding else 0, scale=1.0)
        return a

    def _feed_forward(self, b: ProgramBuilder, w: LayerWeights, i: int, x: Tensor, h2: Tensor | QuantisedActivation,
                      t_max: int) -> Tensor:
        """The block's feed-forward output before post_ffw_norm: the GeGLU MLP, plus the experts in MoE layers.
        h2 may be quantised (int8 activations), and the GLU's output is where an int8 down pays for it."""
        c = self.config
        act: Tensor | QuantisedActivation
        if len(w.gate_up) == 1 and quantises_glu_output(b, w.gate_up[0][0], w.down, t_max):
            act = quantised_activation(b, f"act{i}", t_max, c.d_ffn[i])
        else:
            act = b.activation(f"act{i}", (t_max, c.d_ffn[i]))
        if len(w.gate_up) == 1:  # gelu_tanh(h2 Wgate) * (h2 Wup) in one dispatch
            linear_glu(b, w.gate_up[0][0], h2, act, t_max)
        else:
            (gate, _), (up, _) = _projections(b, w.gate_up, h2, t_max, f"gate_up{i}")
            ops.gelu_mul(b, gate, up, act)
        down = b.activation(f"down{i}", (t_max, c.d_model))
        linear(b, w.down, act, down, t_max)
        if w.moe is None:
            return down
        m, e = w.moe, c.n_experts
        routed = b.activation(f"router_in{i}", (t_max, c.d_model))
        ops.rms_norm(b, x, m.router_norm, routed, c.eps)
        scores = b.activation(f"router{i}", (t_max, e))
        linear(b, m.router, routed, scores, t_max)
        weights = b.activation(f"expert_weights{i}", (t_max, e))
        choice = b.activation(f"expert_choice{i}", (t_max, c.n_experts_used), "u32")
        route = b.activation(f"expert_route{i}", (t_max, c.n_experts_used))
        g4.moe_route(b, scores, m.expert_scale, weights, choice, route)
        hx = b.activation(f"experts_in{i}", (t_max, c.d_model))
        ops.rms_norm(b, x, m.pre_norm, hx, c.eps)
        experts = b.activation(f"experts_out{i}", (t_max, c.d_model))
        width = m.gate_up.n // (2 * e)  # I
        if m.sparse:  # the chosen experts' rows only
            expert_act = b.activation(f"experts_act{i}", (t_max, c.n_experts_used * width))
            g4.moe_matvec(b, m.gate_up, hx, choice, route, expert_act, down=False)
            g4.moe_matvec(b, m.down, expert_act, choice, route, experts, down=True)
        else:  # every expert, weighted by the router (0 for those not chosen)
            gate_up = b.activation(f"experts_gate_up{i}", (t_max, m.gate_up.n))
            linear(b, m.gate_up, hx, gate_up, t_max)
            expert_act = b.activation(f"experts_act{i}", (t_max, e * width))
            g4.moe_gelu_mul(b, gate_up, weights, expert_act)
            linear(b, m.down, expert_act, experts, t_max)
        y = b.activation(f"ffn_out{i}", (t_max, c.d_model))
        ops.rms_norm(b, down, m.post_norm_1, y, c.eps)
        ops.rms_norm(b, experts, m.post_norm_2, y, c.eps, accumulate=True)
        return y


def _projections(b: ProgramBuilder, fused: list[tuple[QuantWeight, list[int]]], x: Tensor, t_max: int, name: str,
                 ) -> list[tuple[Tensor, int]]:
    """x times each of the fused matrices; each projection as (output tensor, first column)."""
    columns: list[tuple[Tensor, int]] = []
    for j, (weight, parts) in enumerate(fused):
        y = b.activation(f"{name}.{j}", (t_max, weight.n))
        linear(b, weight, x, y, t_max)
        columns += [(y, start) for start in parts]
    return columns


def _rope_table_factors(head_dim: int, n_ctx: int, base: float, factors: np.ndarray | None) -> np.ndarray:
    """rope_table with llama.cpp's frequency factors: pair i turns at base^(-2i/head_dim) / factors[i]."""
    table = rope_table(head_dim, n_ctx, base)
    if factors is None:
        return table
    if factors.size != head_dim // 2:
        raise GGUFFormatError(f"rope_freqs has {factors.size} factors for a head of {head_dim}")
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(base), exponent, dtype=np.float32)).astype(np.float32)
    inv_freq = (inv_freq / factors.astype(np.float32)).astype(np.float32)
    angles = (np.arange(n_ctx, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    return np.stack([np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))], -1).astype(np.float32)
