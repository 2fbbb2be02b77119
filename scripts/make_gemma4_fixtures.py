"""Tiny random-weight Gemma 4 models as GGUF (llama.cpp's and Ollama's layouts), and transformers' logits on them.

Two halves. The first needs only numpy and gguf, so tests import it to write the fixture files themselves (a few
MB each, too big to commit): the weights come from a seeded numpy generator, named and shaped as transformers'
`Gemma4ForCausalLM` state dict, and `write_gguf` writes them as F32, Q8_0 or Q4_K in either layout. The second
half (`--golden`, reference venv: torch CPU + transformers 5.24) loads the same weights, dequantised from the
GGUF so both sides compute with identical values, into transformers and records its logits:

    /work/refvenv/bin/python scripts/make_gemma4_fixtures.py --golden tests/golden/gemma4   # ~1 min

Fixtures (every Gemma 4 text feature is in at least one):

- "e2b": E2B's features at toy size: per-layer embeddings (PLE), KV sharing in the last 2 of 6 layers,
  double-wide MLP in the shared layers, sliding (head_dim 32) and full (head_dim 64) layers in a 2:1 pattern,
  proportional RoPE (a quarter of the full layers' dims rotate), final logit softcap 30, window 16.
- "moe": the 26B-A4B's features: attention_k_eq_v (full layers have no v_proj; V is K before its norm and
  RoPE), 2 KV heads on sliding layers and 1 on full ones, a mixture-of-experts block (4 experts, top 2) beside
  the dense MLP in every layer, no PLE, no KV sharing.

Layouts: "llamacpp" as convert_hf_to_gguf.py writes (tokenizer model "gemma4", ffn_gate_up_exps,
ffn_down_exps.scale, per-layer arrays for head_count_kv / feed_forward_length); "ollama" as Ollama's
published blobs (convert_gemma4.go and llama/compat: tokenizer model "llama" with pre "gemma4", per-layer
arrays only where values differ, vision/audio tensors in the same file, expert gate and up as separate
ffn_gate_exps / ffn_up_exps and the expert scale as ffn_gate_inp.per_expert_scale, as older blobs have).

The golden npz per fixture and dtype holds, per prompt i: prompt_<i> (ids), logits_<i> float32 [33, V]
(row 0: after the prompt; row k: after greedy token k), greedy_<i> int32 [32], and the sha256 of the
llama.cpp-layout GGUF the logits were computed on (so a test knows it rebuilt the same file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, Keys, TokenType, quants

Q = GGMLQuantizationType
DTYPES = {"f32": Q.F32, "q8_0": Q.Q8_0, "q4_k": Q.Q4_K}
LAYOUTS = ("llamacpp", "ollama")
N_GREEDY = 32
SEED = 1234


@dataclass(frozen=True)
class Fixture:
    """A tiny Gemma 4 text config (transformers' Gemma4TextConfig fields)."""

    name: str
    layer_types: tuple[str, ...]
    hidden_size: int = 256
    intermediate_size: int = 256
    num_attention_heads: int = 4
    num_key_value_heads: int = 1
    head_dim: int = 32
    global_head_dim: int = 64
    num_global_key_value_heads: int | None = None
    sliding_window: int = 16
    hidden_size_per_layer_input: int = 0
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    attention_k_eq_v: bool = False
    enable_moe_block: bool = False
    num_experts: int | None = None
    top_k_experts: int | None = None
    moe_intermediate_size: int | None = None
    final_logit_softcapping: float = 30.0
    rope_theta: float = 1_000_000.0
    rope_theta_swa: float = 10_000.0
    partial_rotary_factor: float = 0.25
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    prompts: tuple[int, ...] = field(default=(5, 40))  # prompt lengths (40 > the window)

    @property
    def n_layers(self) -> int:
        return len(self.layer_types)

    def hf_config(self) -> dict:
        c = {k: v for k, v in self.__dict__.items() if k not in ("name", "prompts", "rope_theta", "rope_theta_swa",
                                                                   "partial_rotary_factor")}
        c["layer_types"] = list(self.layer_types)
        c["num_hidden_layers"] = self.n_layers
        c["vocab_size"] = c["vocab_size_per_layer_input"] = len(VOCAB)
        c["rope_parameters"] = {
            "sliding_attention": {"rope_type": "default", "rope_theta": self.rope_theta_swa},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": self.partial_rotary_factor,
                               "rope_theta": self.rope_theta},
        }
        c.update(pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True)
        return {k: v for k, v in c.items() if v is not None}

    def sliding(self, i: int) -> bool:
        return self.layer_types[i] == "sliding_attention"

    def shared(self, i: int) -> bool:
        return i >= self.n_layers - self.num_kv_shared_layers

    def head_dim_of(self, i: int) -> int:
        return self.head_dim if self.sliding(i) else self.global_head_dim

    def kv_heads_of(self, i: int) -> int:
        if not self.sliding(i) and self.attention_k_eq_v and self.num_global_key_value_heads:
            return self.num_global_key_value_heads
        return self.num_key_value_heads

    def ffn_of(self, i: int) -> int:
        return self.intermediate_size * (2 if self.use_double_wide_mlp and self.shared(i) else 1)


S, F = "sliding_attention", "full_attention"
FIXTURES = {
    "e2b": Fixture("e2b", (S, S, F, S, S, F), hidden_size_per_layer_input=32, num_kv_shared_layers=2,
                   use_double_wide_mlp=True),
    "moe": Fixture("moe", (S, F, S, F), num_key_value_heads=2, num_global_key_value_heads=1, attention_k_eq_v=True,
                   enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=256),
}


# ---------------------------------------------------------------------------------------------------------------
# Vocabulary: Gemma 4's special pieces, byte fallback, characters and a few merges (BPE over "▁"-spaced text)
# ---------------------------------------------------------------------------------------------------------------

SPACE = "\u2581"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|think|>", "<|channel>",
            "<channel|>", "<|tool_call>", "<tool_call|>", "<|\"|>"]
_CHARS = [SPACE, "\n"] + [chr(c) for c in range(33, 127)]
_MERGES = [(SPACE, "t"), ("h", "e"), (SPACE + "t", "he"), ("i", "n"), (SPACE, "a"), ("e", "r"), ("o", "n"),
           (SPACE, "s"), ("r", "e"), ("a", "t"), ("u", "s"), ("e", "r"), ("m", "o"), ("d", "e")]


def _vocab() -> tuple[list[str], list[int], list[str]]:
    tokens = list(SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.CONTROL] * len(SPECIALS) + [TokenType.BYTE] * 256
    for i, piece in enumerate(SPECIALS):
        if piece in ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|\"|>"):
            types[i] = TokenType.USER_DEFINED  # llama.cpp's converter keeps these visible to the chat parser
    types[SPECIALS.index("<unk>")] = TokenType.UNKNOWN
    merges = []
    for piece in _CHARS:
        tokens.append(piece)
        types.append(TokenType.NORMAL)
    for left, right in _MERGES:
        if left + right not in tokens:
            tokens.append(left + right)
            types.append(TokenType.NORMAL)
            merges.append(f"{left} {right}")
    return tokens, [int(t) for t in types], merges


VOCAB, TOKEN_TYPES, MERGES = _vocab()
FIRST_TEXT_ID = len(SPECIALS) + 256  # prompts use ordinary pieces only

# Gemma 4's chat format (the turn and thinking markup of its template), trimmed to what the fixtures need.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<|turn>' + role + '\\n' + (message['content'] or '') | trim + '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)


# ---------------------------------------------------------------------------------------------------------------
# Weights (numpy only): transformers' state dict names and shapes
# ---------------------------------------------------------------------------------------------------------------

def weight_shapes(fx: Fixture) -> dict[str, tuple[int, ...]]:
    """transformers' Gemma4ForCausalLM parameter names and shapes (lm_head tied, so left out)."""
    d, v, p, n = fx.hidden_size, len(VOCAB), fx.hidden_size_per_layer_input, fx.n_layers
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if p:
        shapes |= {"model.embed_tokens_per_layer.weight": (v, n * p),
                   "model.per_layer_model_projection.weight": (n * p, d),
                   "model.per_layer_projection_norm.weight": (p,)}
    for i in range(n):
        pre, hd, kv, ff = f"model.layers.{i}.", fx.head_dim_of(i), fx.kv_heads_of(i), fx.ffn_of(i)
        q = fx.num_attention_heads * hd
        shapes |= {pre + "layer_scalar": (1,), pre + "self_attn.q_proj.weight": (q, d),
                   pre + "self_attn.q_norm.weight": (hd,), pre + "self_attn.o_proj.weight": (d, q),
                   pre + "mlp.gate_proj.weight": (ff, d), pre + "mlp.up_proj.weight": (ff, d),
                   pre + "mlp.down_proj.weight": (d, ff)}
        if not fx.shared(i):
            shapes |= {pre + "self_attn.k_proj.weight": (kv * hd, d), pre + "self_attn.k_norm.weight": (hd,)}
            if not (fx.attention_k_eq_v and not fx.sliding(i)):
                shapes[pre + "self_attn.v_proj.weight"] = (kv * hd, d)
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            shapes[pre + norm + ".weight"] = (d,)
        if p:
            shapes |= {pre + "per_layer_input_gate.weight": (p, d), pre + "per_layer_projection.weight": (d, p),
                       pre + "post_per_layer_input_norm.weight": (d,)}
        if fx.enable_moe_block:
            e, mi = fx.num_experts, fx.moe_intermediate_size
            shapes |= {pre + "router.proj.weight": (e, d), pre + "router.scale": (d,),
                       pre + "router.per_expert_scale": (e,), pre + "experts.gate_up_proj": (e, 2 * mi, d),
                       pre + "experts.down_proj": (e, d, mi)}
            for norm in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                         "pre_feedforward_layernorm_2"):
                shapes[pre + norm + ".weight"] = (d,)
    return shapes


def random_weights(fx: Fixture, seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded float32 weights: matrices ~ N(0, 1/fan_in) (so activations keep their scale), norm weights and
    scales near 1 (Gemma 4 multiplies by the stored weight as is), embeddings ~ N(0, 1/width)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(fx).items():
        if name.endswith(("norm.weight", "router.scale", "layer_scalar", "per_expert_scale")):
            w = 1.0 + 0.2 * rng.standard_normal(shape)
            if name == "model.norm.weight":  # logits ~ N(0, 4^2) through the tied head: spread, below the softcap
                w *= 4.0
        elif "embed_tokens" in name:  # scaled by sqrt(width) on lookup: rows of about unit RMS, as the blocks add
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = w.astype(np.float32)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Quantisation: Q8_0 from gguf-py, Q4_K here (gguf-py only dequantises it)
# ---------------------------------------------------------------------------------------------------------------

def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """Q4_K blocks (144 bytes per 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
    nibbles) of a float array whose last dimension is a multiple of 256; returns uint8 [..., row bytes]."""
    rows = w.reshape(-1, 256).astype(np.float32)
    sub = rows.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(-1), 0.0)
    scale = (sub.max(-1) - lo) / 15.0
    d = np.maximum(scale.max(-1), 1e-30) / 63.0
    dmin = np.maximum((-lo).max(-1), 1e-30) / 63.0
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    d32, dmin32 = d16.astype(np.float32), dmin16.astype(np.float32)
    sc = np.clip(np.rint(scale / d32[:, None]), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(-lo / dmin32[:, None]), 0, 63).astype(np.uint8)
    step = d32[:, None] * sc
    q = np.rint((sub + (dmin32[:, None] * mn)[..., None]) / np.where(step == 0, 1, step)[..., None])
    q = np.clip(q, 0, 15).astype(np.uint8)  # [blocks, 8, 32]
    scales = np.zeros((rows.shape[0], 12), np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)  # subblock pairs: low nibble first
    blocks = np.concatenate([d16.view(np.uint8).reshape(-1, 2), dmin16.view(np.uint8).reshape(-1, 2), scales, qs],
                            axis=1)
    return blocks.reshape(*w.shape[:-1], w.shape[-1] // 256 * 144)


def quantize(w: np.ndarray, qtype: Q) -> np.ndarray:
    if qtype == Q.Q4_K:
        return quantize_q4_k(w)
    return quants.quantize(w, qtype)


def tensor_type(name: str, shape: tuple[int, ...], dtype: Q) -> Q:
    """The type a tensor gets in a file of this dtype: matrices are quantised where their rows divide into
    blocks (Q4_K falls back to Q8_0, as llama.cpp's mixes do); norms, scales and the router stay F32."""
    if dtype == Q.F32 or len(shape) < 2 or "ffn_gate_inp" in name:
        return Q.F32
    if dtype == Q.Q4_K and shape[-1] % 256 == 0:
        return Q.Q4_K
    return Q.Q8_0 if shape[-1] % 32 == 0 else Q.F32


# ---------------------------------------------------------------------------------------------------------------
# GGUF: transformers names -> llama.cpp / Ollama names
# ---------------------------------------------------------------------------------------------------------------

_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
        "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
        "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight"}
_LAYER = {"layer_scalar": "layer_output_scale.weight", "self_attn.q_proj.weight": "attn_q.weight",
          "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
          "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
          "self_attn.k_norm.weight": "attn_k_norm.weight", "input_layernorm.weight": "attn_norm.weight",
          "post_attention_layernorm.weight": "post_attention_norm.weight",
          "pre_feedforward_layernorm.weight": "ffn_norm.weight",
          "post_feedforward_layernorm.weight": "post_ffw_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
          "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
          "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
          "post_per_layer_input_norm.weight": "post_norm.weight", "router.proj.weight": "ffn_gate_inp.weight",
          "router.scale": "ffn_gate_inp.scale", "router.per_expert_scale": "ffn_down_exps.scale",
          "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
          "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
          "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
          "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight"}


def gguf_tensors(fx: Fixture, weights: dict[str, np.ndarray], layout: str) -> list[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array in GGUF row order) of every tensor of a layout."""
    out = []
    for name, w in weights.items():
        if name in _TOP:
            out.append((_TOP[name], w))
            continue
        layer, rest = name.removeprefix("model.layers.").split(".", 1)
        target = f"blk.{layer}.{_LAYER[rest]}"
        if layout == "ollama" and rest == "experts.gate_up_proj":  # older Ollama blobs: gate and up apart
            half = w.shape[1] // 2
            out += [(f"blk.{layer}.ffn_gate_exps.weight", w[:, :half]), (f"blk.{layer}.ffn_up_exps.weight",
                                                                        w[:, half:])]
        elif layout == "ollama" and rest == "router.per_expert_scale":
            out.append((f"blk.{layer}.ffn_gate_inp.per_expert_scale", w))
        else:
            out.append((target, w))
    n_rot = int(fx.global_head_dim * fx.partial_rotary_factor / 2)  # proportional RoPE as frequency factors
    out.append(("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (fx.global_head_dim // 2 - n_rot),
                                              np.float32)))
    if layout == "ollama":  # Ollama's blobs carry the vision and audio towers too; a text loader skips them
        out += [("v.patch_embd.weight", np.zeros((8, 12), np.float32)),
                ("a.conv1d.0.weight", np.zeros((4, 3), np.float32)),
                ("mm.input_projection.weight", np.zeros((8, 8), np.float32))]
    return out


def _metadata(w: GGUFWriter, fx: Fixture, layout: str) -> None:
    arch = "gemma4"
    key = lambda k: k.format(arch=arch)  # noqa: E731
    n = fx.n_layers
    w.add_uint32(key(Keys.LLM.CONTEXT_LENGTH), fx.max_position_embeddings)
    w.add_uint32(key(Keys.LLM.EMBEDDING_LENGTH), fx.hidden_size)
    w.add_uint32(key(Keys.LLM.BLOCK_COUNT), n)
    ffn = [fx.ffn_of(i) for i in range(n)]
    if fx.use_double_wide_mlp:
        w.add_array(key(Keys.LLM.FEED_FORWARD_LENGTH), ffn)
    else:
        w.add_uint32(key(Keys.LLM.FEED_FORWARD_LENGTH), fx.intermediate_size)
    w.add_uint32(key(Keys.Attention.HEAD_COUNT), fx.num_attention_heads)
    kv = [fx.kv_heads_of(i) for i in range(n)]
    if (layout == "llamacpp" and fx.num_global_key_value_heads) or len(set(kv)) > 1:
        w.add_array(key(Keys.Attention.HEAD_COUNT_KV), kv)
    else:
        w.add_uint32(key(Keys.Attention.HEAD_COUNT_KV), kv[0])
    w.add_float32(key(Keys.Attention.LAYERNORM_RMS_EPS), fx.rms_norm_eps)
    for k, v in ((Keys.Attention.KEY_LENGTH, fx.global_head_dim), (Keys.Attention.VALUE_LENGTH, fx.global_head_dim),
                 (Keys.Attention.KEY_LENGTH_SWA, fx.head_dim), (Keys.Attention.VALUE_LENGTH_SWA, fx.head_dim),
                 (Keys.Attention.SLIDING_WINDOW, fx.sliding_window),
                 (Keys.Attention.SHARED_KV_LAYERS, fx.num_kv_shared_layers),
                 (Keys.LLM.EMBD_LENGTH_PER_LAYER_INP, fx.hidden_size_per_layer_input),
                 (Keys.Rope.DIMENSION_COUNT, fx.global_head_dim), (Keys.Rope.DIMENSION_COUNT_SWA, fx.head_dim)):
        w.add_uint32(key(k), v)
    w.add_array(key(Keys.Attention.SLIDING_WINDOW_PATTERN), [fx.sliding(i) for i in range(n)])
    w.add_float32(key(Keys.Rope.FREQ_BASE), fx.rope_theta)
    w.add_float32(key(Keys.Rope.FREQ_BASE_SWA), fx.rope_theta_swa)
    w.add_float32(key(Keys.LLM.FINAL_LOGIT_SOFTCAPPING), fx.final_logit_softcapping)
    if fx.enable_moe_block:
        w.add_uint32(key(Keys.LLM.EXPERT_COUNT), fx.num_experts)
        w.add_uint32(key(Keys.LLM.EXPERT_USED_COUNT), fx.top_k_experts)
        w.add_uint32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), fx.moe_intermediate_size)
    # tokenizer: llama.cpp's converter says "gemma4"; Ollama's blobs say "llama" with pre "gemma4" and merges
    w.add_string(Keys.Tokenizer.MODEL, "gemma4" if layout == "llamacpp" else "llama")
    w.add_string(Keys.Tokenizer.PRE, "gemma4")
    w.add_array(Keys.Tokenizer.LIST, VOCAB)
    w.add_array(Keys.Tokenizer.SCORES, [0.0] * len(VOCAB))
    w.add_array(Keys.Tokenizer.TOKEN_TYPE, TOKEN_TYPES)
    w.add_array(Keys.Tokenizer.MERGES, MERGES)
    w.add_uint32(Keys.Tokenizer.BOS_ID, 2)
    w.add_uint32(Keys.Tokenizer.EOS_ID, 1)
    w.add_uint32(Keys.Tokenizer.PAD_ID, 0)
    w.add_uint32(Keys.Tokenizer.UNK_ID, 3)
    w.add_bool(Keys.Tokenizer.ADD_BOS, True)
    if layout == "llamacpp":  # Ollama renders Gemma 4 prompts in Go and writes no template
        w.add_string(Keys.Tokenizer.CHAT_TEMPLATE, CHAT_TEMPLATE)


def write_gguf(fx: Fixture, path: Path, dtype: str, layout: str, weights: dict[str, np.ndarray] | None = None,
               ) -> Path:
    """Write a fixture as GGUF of one dtype ("f32", "q8_0", "q4_k") and layout ("llamacpp", "ollama")."""
    weights = random_weights(fx) if weights is None else weights
    writer = GGUFWriter(path, "gemma4")
    _metadata(writer, fx, layout)
    for name, w in gguf_tensors(fx, weights, layout):
        qtype = tensor_type(name, w.shape, DTYPES[dtype])
        if qtype == Q.F32:
            writer.add_tensor(name, np.ascontiguousarray(w, np.float32))
        else:
            writer.add_tensor(name, quantize(np.ascontiguousarray(w, np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def dequantized_weights(fx: Fixture, dtype: str) -> dict[str, np.ndarray]:
    """The weights as a file of this dtype holds them (quantised and back), under transformers' names."""
    from gguf.quants import dequantize

    out = {}
    for name, w in random_weights(fx).items():
        target = _TOP.get(name) or "blk.0." + _LAYER[name.removeprefix("model.layers.").split(".", 1)[1]]
        qtype = tensor_type(target, w.shape, DTYPES[dtype])
        out[name] = w if qtype == Q.F32 else dequantize(quantize(w, qtype), qtype).reshape(w.shape)
    return out


def prompts(fx: Fixture) -> list[list[int]]:
    """Prompt ids: BOS, then seeded ordinary pieces."""
    rng = np.random.default_rng(SEED + 1)
    return [[2] + rng.integers(FIRST_TEXT_ID, len(VOCAB), n - 1).tolist() for n in fx.prompts]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Reference (torch + transformers, reference venv only)
# ---------------------------------------------------------------------------------------------------------------

def reference(fx: Fixture, dtype: str) -> dict[str, np.ndarray]:
    """transformers' logits on the dequantised weights: after each prompt, then after each of N_GREEDY greedy
    tokens, every step a full forward without a cache (the exact definition, no cache policy involved)."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    config = Gemma4TextConfig(**fx.hf_config(), attn_implementation="eager")
    model = Gemma4ForCausalLM(config).eval()
    state = {k: torch.from_numpy(v.copy()) for k, v in dequantized_weights(fx, dtype).items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for i, ids in enumerate(prompts(fx)):
            seq, rows, greedy = list(ids), [], []
            for _ in range(N_GREEDY + 1):
                logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].float().numpy()
                rows.append(logits)
                greedy.append(int(logits.argmax()))
                seq.append(greedy[-1])
            out[f"prompt_{i}"] = np.array(ids, np.int32)
            out[f"logits_{i}"] = np.stack(rows).astype(np.float32)
            out[f"greedy_{i}"] = np.array(greedy[:N_GREEDY], np.int32)
    return out


def make_golden(out_dir: Path, work: Path) -> None:
    import torch
    import transformers

    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED, "files": {}}
    for fx in FIXTURES.values():
        for dtype in DTYPES:
            path = write_gguf(fx, work / f"gemma4_{fx.name}_{dtype}.gguf", dtype, "llamacpp")
            meta["files"][path.name] = file_sha256(path)
            np.savez_compressed(out_dir / f"{fx.name}_{dtype}.npz", **reference(fx, dtype))
            print(f"{fx.name} {dtype}: done", flush=True)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--golden", type=Path, help="write transformers' logits here (reference venv)")
    parser.add_argument("--out", type=Path, help="write every fixture GGUF (all dtypes, both layouts) here")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gemma4_fixtures"))
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for fx in FIXTURES.values():
            for dtype in DTYPES:
                for layout in LAYOUTS:
                    write_gguf(fx, args.out / f"gemma4_{fx.name}_{dtype}_{layout}.gguf", dtype, layout)
    if args.golden:
        args.work.mkdir(parents=True, exist_ok=True)
        make_golden(args.golden, args.work)
    if not (args.out or args.golden):
        parser.error("give --out DIR and/or --golden DIR")


if __name__ == "__main__":
    main()
