"""Gemma 4 (text), from a GGUF in llama.cpp's layout or Ollama's: the shared decoder (models/text/decoder.py) with
per-layer embeddings (PLE), KV sharing, experts, k = v on full layers, proportional RoPE and a final softcap.

One step, for T tokens at positions pos..pos+T-1 (rows of any sequences, see models/text/step_io.py):

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
MoE reads only the chosen experts' rows (gpu/ops/moe.py's expert_matvec) where each expert tensor fits one binding;
otherwise every expert runs on every token through the ordinary matrix products, weighted by the router (0
for experts not chosen), which costs experts / top_k times the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from gguf import MODEL_TENSOR, GGUFReader, Keys, TokenType

from gpu.ops import blocks, moe
from gpu.ops import per_layer_embedding as ple
from gpu.ops import transformer as ops
from gpu.ops.blocks import BlockInput, BlockOutput, Residual
from gpu.ops.matmul import embedding, linear
from gpu.program import ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile
from models.formats.weights import GGUFSource, Uploader
from models.gemma.gemma4_weights import experts_down, experts_fit_one_binding, experts_gate_up
from models.text.chat_template import GEMMA4_TEMPLATE
from models.text.decoder import Decoder, DecoderConfig, LayerWeights, PerRow, per_layer, tensor_name
from models.text.step_io import StepIO
from models.text.tokenizer import Tokenizer, read_gguf_vocab

T = MODEL_TENSOR
SOFTCAP = 30.0  # final logit softcap of the Gemma 4 checkpoints (HF config final_logit_softcapping)
# Pieces llama.cpp's converter makes user-defined (always rendered) so a chat parser sees them
VISIBLE_PIECES = frozenset({"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>'})


def read_config(f: GGUFFile) -> DecoderConfig:
    """Gemma 4's decoder config from a GGUF's metadata (per-layer arrays, or one value for every layer)."""
    _, embd_shape, _ = f.raw(tensor_name(T.TOKEN_EMBD))
    n = int(f.value(Keys.LLM.BLOCK_COUNT))
    pattern = f.value(Keys.Attention.SLIDING_WINDOW_PATTERN, None)
    if pattern is None:  # HF's default: 5 sliding layers to 1 full, the last one full
        pattern = [(i + 1) % 6 != 0 and i != n - 1 for i in range(n)]
    elif isinstance(pattern, int):  # a period, as Gemma 3's files write it: every pattern-th layer is full
        pattern = [(i + 1) % pattern != 0 for i in range(n)]
    sliding = tuple(bool(s) for s in per_layer(pattern, n))
    full_dim = int(f.value(Keys.Attention.KEY_LENGTH))
    swa_dim = int(f.value(Keys.Attention.KEY_LENGTH_SWA, full_dim))
    n_heads = int(f.value(Keys.Attention.HEAD_COUNT))
    d_model = int(f.value(Keys.LLM.EMBEDDING_LENGTH))
    return DecoderConfig(
        n_layers=n,
        d_model=d_model,
        n_heads=n_heads,
        head_dims=tuple(swa_dim if s else full_dim for s in sliding),
        kv_heads=tuple(int(v) for v in per_layer(f.value(Keys.Attention.HEAD_COUNT_KV, n_heads), n)),
        d_ffn=tuple(int(v) for v in per_layer(f.value(Keys.LLM.FEED_FORWARD_LENGTH), n)),
        sliding=sliding,
        eps=float(f.value(Keys.Attention.LAYERNORM_RMS_EPS, 1e-6)),
        window=int(f.value(Keys.Attention.SLIDING_WINDOW, 512)),
        rope_base_full=float(f.value(Keys.Rope.FREQ_BASE, 1_000_000.0)),
        rope_base_swa=float(f.value(Keys.Rope.FREQ_BASE_SWA, 10_000.0)),
        rope_scale_full=1.0,
        query_scale=1.0,  # the q and k norms set the scores' scale
        embed_scale=math.sqrt(d_model),
        n_ctx_train=int(f.value(Keys.LLM.CONTEXT_LENGTH)),
        vocab_size=int(embd_shape[1]),
        # every published Gemma 4 caps at 30; a converter that leaves the key out means the model's own 30
        softcap=float(f.value(Keys.LLM.FINAL_LOGIT_SOFTCAPPING, SOFTCAP)),
        v_norm=True,
        n_shared_kv=int(f.value(Keys.Attention.SHARED_KV_LAYERS, 0)),
        d_ple=int(f.value(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, 0)),
        n_experts=int(f.value(Keys.LLM.EXPERT_COUNT, 0)),
        n_experts_used=int(f.value(Keys.LLM.EXPERT_USED_COUNT, 0)),
        # the converter writes no use_bidirectional_attention; the kinds that set it to "vision" (26B, 31B) are
        # the ones without per-layer embeddings, while E2B and E4B (unset) have them
        images_both_ways_sliding_only=not f.value(Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, 0),
    )


@dataclass
class Moe:
    router: QuantWeight  # [E, D] router projection
    router_norm: Tensor  # [D] the router's input scale times D^-0.5 (applied as a norm weight)
    expert_scale: Tensor  # [E]
    pre_norm: Tensor  # [D] pre_ffw_norm_2
    gate_up: QuantWeight  # [E * 2I, D]: each expert's I gate rows then its I up rows
    down: QuantWeight  # sparse: [E * D, I], each expert's rows; dense: [D, E * I], the experts side by side
    sparse: bool  # the chosen experts only (expert_matvec), or all of them weighted (the dense products)
    post_norm_1: Tensor  # [D] on the dense MLP's output
    post_norm_2: Tensor  # [D] on the experts' output


@dataclass
class Gemma4Layer(LayerWeights):
    out_scale: Tensor  # [1] layer_output_scale
    moe: Moe | None
    ple_gate: QuantWeight | None  # [P, D]
    ple_proj: QuantWeight | None  # [D, P]
    ple_post_norm: Tensor | None


class Gemma4(Decoder):
    """Gemma 4's weights on the GPU and the programs that run its steps."""

    architecture = "gemma4"
    # its blocks end in a scaled residual (and a per-layer input): plain dispatches at the block boundaries
    fusable = False
    sparse_moe = True  # run only the chosen experts where their tensors fit a binding (tests turn it off)
    layers: list[Gemma4Layer]  # type: ignore[assignment]

    @staticmethod
    def read_config(f: GGUFFile) -> DecoderConfig:
        return read_config(f)

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

    def load_globals(self, source: GGUFSource, up: Uploader) -> None:
        if self.config.d_ple:
            # the row an image's or audio clip's rows look up (transformers' Gemma4Model: their ids become the pad's)
            self.ple_pad_id = int(source.f.value(Keys.Tokenizer.PAD_ID, 0))
            self.ple_embd = self._matrix(source, up, tensor_name(T.PER_LAYER_TOKEN_EMBD))
            self.ple_model_proj = self._matrix(source, up, tensor_name(T.PER_LAYER_MODEL_PROJ))
            self.ple_proj_norm = self._vector(source, up, tensor_name(T.PER_LAYER_PROJ_NORM))

    def load_layer(self, source: GGUFSource, up: Uploader, i: int) -> Gemma4Layer:
        c = self.config
        base = super().load_layer(source, up, i)

        def matrix(kind: MODEL_TENSOR) -> QuantWeight:
            return self._matrix(source, up, tensor_name(kind, i))

        def vector(kind: MODEL_TENSOR) -> Tensor:
            return self._vector(source, up, tensor_name(kind, i))

        moe_weights = None
        if c.n_experts:
            f = source.f
            router_scale = source.array(tensor_name(T.FFN_GATE_INP, i, "scale")) * np.float32(c.d_model ** -0.5)
            expert_scale = tensor_name(T.FFN_DOWN_EXP, i, "scale")
            if not source.has(expert_scale):  # older Ollama blobs
                expert_scale = tensor_name(T.FFN_GATE_INP, i, "per_expert_scale")
            sparse = self.sparse_moe and experts_fit_one_binding(f, i, self.executor.device.limits.max_binding_bytes)
            moe_weights = Moe(
                router=matrix(T.FFN_GATE_INP), router_norm=up.array(f"router_norm.{i}", router_scale),
                expert_scale=self._vector(source, up, expert_scale), pre_norm=vector(T.FFN_PRE_NORM_2),
                gate_up=experts_gate_up(f, up, i), down=experts_down(f, up, i, sparse), sparse=sparse,
                post_norm_1=vector(T.FFN_POST_NORM_1), post_norm_2=vector(T.FFN_POST_NORM_2))
        scale_name = tensor_name(T.LAYER_OUT_SCALE, i)
        return Gemma4Layer(
            **vars(base),
            out_scale=(self._vector(source, up, scale_name) if source.has(scale_name)
                       else up.array(f"out_scale.{i}", np.ones(1))),
            moe=moe_weights,
            ple_gate=matrix(T.PER_LAYER_INP_GATE) if c.d_ple else None,
            ple_proj=matrix(T.PER_LAYER_PROJ) if c.d_ple else None,
            ple_post_norm=vector(T.PER_LAYER_POST_NORM) if c.d_ple else None,
        )

    def begin_step(self, b: ProgramBuilder, io: StepIO, x: Tensor, t_max: int) -> PerRow:
        """pli [T, L * P]: each layer's per-layer input (the PLE table's row and a projection of x)."""
        c = self.config
        if not c.d_ple:
            return {}
        width = c.n_layers * c.d_ple
        pli = b.activation("pli", (t_max, width))
        embedding(b, self.ple_embd, io.ids, pli, t_max, scale=math.sqrt(c.d_ple), rows=io.rows,
                  slot_tokens=io.slot_tokens, image_id=self.ple_pad_id if io.images is not None else None)
        proj = b.activation("ple_proj", (t_max, width))
        linear(b, self.ple_model_proj, x, proj, t_max)
        ple.combine(b, proj, self.ple_proj_norm, pli, c.n_layers, c.eps, c.d_model ** -0.5)
        return {"pli": pli}

    def feed_forward(self, b: ProgramBuilder, w: LayerWeights, i: int, h: BlockInput, residual: Residual,
                     ) -> BlockOutput:
        """The GeGLU MLP, plus the experts in MoE layers."""
        assert isinstance(w, Gemma4Layer)
        down = blocks.gated_feed_forward(b, w.gate_up, w.down, h, residual, str(i))
        if w.moe is None:
            return down
        assert isinstance(down, Tensor)
        c, m, t, x = self.config, w.moe, residual.t_max, residual.x
        e = c.n_experts
        routed = b.activation(f"router_in{i}", (t, c.d_model))
        ops.rms_norm(b, x, m.router_norm, routed, c.eps)
        scores = b.activation(f"router{i}", (t, e))
        linear(b, m.router, routed, scores, t)
        weights = b.activation(f"expert_weights{i}", (t, e))
        choice = b.activation(f"expert_choice{i}", (t, c.n_experts_used), "u32")
        routes = b.activation(f"expert_route{i}", (t, c.n_experts_used))
        moe.route(b, scores, m.expert_scale, weights, choice, routes)
        hx = b.activation(f"experts_in{i}", (t, c.d_model))
        ops.rms_norm(b, x, m.pre_norm, hx, c.eps)
        experts = b.activation(f"experts_out{i}", (t, c.d_model))
        width = m.gate_up.n // (2 * e)  # I
        if m.sparse:  # the chosen experts' rows only
            expert_act = b.activation(f"experts_act{i}", (t, c.n_experts_used * width))
            moe.expert_matvec(b, m.gate_up, hx, choice, routes, expert_act, down=False)
            moe.expert_matvec(b, m.down, expert_act, choice, routes, experts, down=True)
        else:  # every expert, weighted by the router (0 for those not chosen)
            gate_up = b.activation(f"experts_gate_up{i}", (t, m.gate_up.n))
            linear(b, m.gate_up, hx, gate_up, t)
            expert_act = b.activation(f"experts_act{i}", (t, e * width))
            moe.weighted_gelu_mul(b, gate_up, weights, expert_act)
            linear(b, m.down, expert_act, experts, t)
        y = b.activation(f"ffn_out{i}", (t, c.d_model))
        ops.rms_norm(b, down, m.post_norm_1, y, c.eps)
        ops.rms_norm(b, experts, m.post_norm_2, y, c.eps, accumulate=True)
        return y

    def block_output(self, b: ProgramBuilder, io: StepIO, w: LayerWeights, i: int, y: BlockOutput,
                     residual: Residual, per_row: PerRow, r_max: int) -> BlockInput:
        """x += rms_norm(y) * post_ffw_norm, then the per-layer input's own residual, the layer's output scale,
        and the next norm."""
        assert isinstance(w, Gemma4Layer) and isinstance(y, Tensor)
        c, t, x = self.config, residual.t_max, residual.x
        last = i + 1 == c.n_layers
        h = b.activation("last" if last else f"h{i + 1}", (r_max if last else t, c.d_model))
        # only each sequence's last token reaches the head (rows already gathered: row r is output r)
        gather = io.out_rows if last and t > r_max else None
        post_norm = w.post_ffw_norm
        if "pli" in per_row:
            assert w.ple_gate is not None and w.ple_proj is not None and w.ple_post_norm is not None
            # residual_norm's add; its h (a norm of x) is not needed, but its subgroup sums make it quicker than
            # rms_norm's accumulate
            unused = b.activation(f"ple_unused{i}", (t, c.d_model))
            ops.residual_norm(b, y, w.post_ffw_norm, x, w.post_ffw_norm, unused, c.eps)
            gate = b.activation(f"ple_gate{i}", (t, c.d_ple))
            linear(b, w.ple_gate, x, gate, t)
            gated = b.activation(f"ple_act{i}", (t, c.d_ple))
            ple.gelu_mul_layer(b, gate, per_row["pli"], i, gated)
            y = b.activation(f"ple_out{i}", (t, c.d_model))
            linear(b, w.ple_proj, gated, y, t)
            post_norm = w.ple_post_norm
        ops.residual_scale_norm(b, y, post_norm, x, w.out_scale, self.next_norm(i), h, c.eps, out_rows=gather)
        return h
