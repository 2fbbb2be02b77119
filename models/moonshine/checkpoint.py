"""A Moonshine checkpoint from a Hugging Face folder (config.json, model.safetensors, tokenizer.json: the layout of
UsefulSensors/moonshine-tiny and -base, transformers' MoonshineForConditionalGeneration state dict).

Weights are handed over as the network uses them: q | k | v and k | v fused, the decoder's fc1 split into its up and
gate halves (transformers' `hidden, gate = fc1(x).chunk(2)`; out = silu(gate) * hidden), and the q and k rows of
every head permuted so the interleaved rotary pairs (2i, 2i + 1) of transformers' Moonshine become kernels/rope.wgsl's
NeoX pairs (i, i + D/2): q and k move together, so attention scores are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from models.formats.safetensors_dir import ModelDir, ModelDirError


@dataclass(frozen=True)
class MoonshineConfig:
    """What the network needs of config.json."""

    d_model: int
    d_ffn: int
    enc_layers: int
    dec_layers: int
    enc_heads: int
    dec_heads: int
    vocab_size: int
    n_text_ctx: int  # max_position_embeddings: decoder positions
    rope_theta: float
    rotary_factor: float  # partial_rotary_factor: the share of a head's dims that rotate
    bos: int  # decoder_start_token_id
    eos: int

    @property
    def enc_head_dim(self) -> int:
        return self.d_model // self.enc_heads

    @property
    def dec_head_dim(self) -> int:
        return self.d_model // self.dec_heads

    @classmethod
    def from_json(cls, c: dict) -> MoonshineConfig:
        if c.get("model_type") != "moonshine":
            raise ModelDirError(f"config.json's model_type is {c.get('model_type')!r}, not 'moonshine'")
        rope = c.get("rope_parameters") or {}
        for heads, kv in (("encoder_num_attention_heads", "encoder_num_key_value_heads"),
                          ("decoder_num_attention_heads", "decoder_num_key_value_heads")):
            if c.get(kv) not in (None, c[heads]):
                raise ModelDirError(f"Moonshine with {kv} != {heads} is not supported")
        if c.get("attention_bias"):
            raise ModelDirError("Moonshine with attention_bias is not supported (the published models have none)")
        if c.get("encoder_hidden_act", "gelu") != "gelu" or c.get("decoder_hidden_act", "silu") != "silu":
            raise ModelDirError("Moonshine's activations must be gelu (encoder) and silu (decoder)")
        eos = c.get("eos_token_id", 2)
        return cls(d_model=c["hidden_size"], d_ffn=c["intermediate_size"], enc_layers=c["encoder_num_hidden_layers"],
                   dec_layers=c["decoder_num_hidden_layers"], enc_heads=c["encoder_num_attention_heads"],
                   dec_heads=c["decoder_num_attention_heads"], vocab_size=c["vocab_size"],
                   n_text_ctx=c.get("max_position_embeddings", 512),
                   rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                   rotary_factor=float(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.9))),
                   bos=c.get("decoder_start_token_id", 1), eos=eos[0] if isinstance(eos, list) else eos)


def rotary_pairs(head_dim: int, factor: float) -> int:
    """Rotated pairs of a head: transformers' inv_freq = arange(0, int(head_dim * factor), 2) has this many."""
    return -(-int(head_dim * factor) // 2)


def rope_table(head_dim: int, factor: float, theta: float, positions: int) -> np.ndarray:
    """(cos, sin) per position and NeoX pair, f32 [positions, head_dim]: pairs past the rotated ones are (1, 0)."""
    dim = int(head_dim * factor)
    pairs = rotary_pairs(head_dim, factor)
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)  # float32 as transformers computes it
    angles = np.arange(positions, dtype=np.float32)[:, None] * inv_freq[None]
    cos = np.ones((positions, head_dim // 2), np.float32)
    sin = np.zeros((positions, head_dim // 2), np.float32)
    cos[:, :pairs], sin[:, :pairs] = np.cos(angles), np.sin(angles)
    return np.stack([cos, sin], -1).reshape(positions, head_dim)


def neox_order(head_dim: int, pairs: int) -> np.ndarray:
    """Source dim of each dim of a head after the permutation: rotated pair i (dims 2i, 2i + 1) to (i, i + D/2), the
    unrotated dims after them in each half."""
    if head_dim % 2:
        raise ModelDirError(f"a head of {head_dim} dims (odd) is not supported")
    half = head_dim // 2
    rest = list(range(2 * pairs, head_dim))
    return np.array([2 * i for i in range(pairs)] + rest[:half - pairs]
                    + [2 * i + 1 for i in range(pairs)] + rest[half - pairs:])


def _permute_heads(w: np.ndarray, heads: int, order: np.ndarray) -> np.ndarray:
    """Rows of a q or k projection [heads * D, d] reordered within each head."""
    d = w.shape[0] // heads
    return w.reshape(heads, d, -1)[:, order].reshape(w.shape)


@dataclass
class MoonshineCheckpoint:
    config: MoonshineConfig
    tensors: dict[str, np.ndarray]  # float32, names of the network (see load_checkpoint)
    tokenizer: Tokenizer


def load_checkpoint(path: str | Path) -> MoonshineCheckpoint:
    """Read a Moonshine HF folder into the network's tensors:
    conv1.w, conv2.w/.b, conv3.w/.b, gn.g/.b, enc.ln.g; enc.{i}.{attn_ln,mlp_ln}.g, .qkv.w, .o.w, .fc1.w/.b, .fc2.w/.b;
    dec.{i}.{attn_ln,cross_ln,mlp_ln}.g, .qkv.w, .o.w, .cross_q.w, .cross_kv.w, .cross_o.w, .up.w/.b, .gate.w/.b,
    .fc2.w/.b; dec.ln.g, embed."""
    d = ModelDir(path)
    c = MoonshineConfig.from_json(d.config)
    prefix = "model." if d.has("model.encoder.conv1.weight") else ""

    def get(name: str) -> np.ndarray:
        return d.tensor(prefix + name)

    enc_order = neox_order(c.enc_head_dim, rotary_pairs(c.enc_head_dim, c.rotary_factor))
    dec_order = neox_order(c.dec_head_dim, rotary_pairs(c.dec_head_dim, c.rotary_factor))
    t: dict[str, np.ndarray] = {
        "conv1.w": get("encoder.conv1.weight"), "conv2.w": get("encoder.conv2.weight"),
        "conv2.b": get("encoder.conv2.bias"), "conv3.w": get("encoder.conv3.weight"),
        "conv3.b": get("encoder.conv3.bias"), "gn.g": get("encoder.groupnorm.weight"),
        "gn.b": get("encoder.groupnorm.bias"), "enc.ln.g": get("encoder.layer_norm.weight"),
        "dec.ln.g": get("decoder.norm.weight"), "embed": get("decoder.embed_tokens.weight")}
    for i in range(c.enc_layers):
        src, dst = f"encoder.layers.{i}.", f"enc.{i}."
        a = src + "self_attn."
        t[dst + "qkv.w"] = np.concatenate([_permute_heads(get(a + "q_proj.weight"), c.enc_heads, enc_order),
                                           _permute_heads(get(a + "k_proj.weight"), c.enc_heads, enc_order),
                                           get(a + "v_proj.weight")])
        t[dst + "o.w"] = get(a + "o_proj.weight")
        t[dst + "attn_ln.g"] = get(src + "input_layernorm.weight")
        t[dst + "mlp_ln.g"] = get(src + "post_attention_layernorm.weight")
        for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
            t[dst + name.replace("weight", "w").replace("bias", "b")] = get(src + "mlp." + name)
    for i in range(c.dec_layers):
        src, dst = f"decoder.layers.{i}.", f"dec.{i}."
        a, x = src + "self_attn.", src + "encoder_attn."
        t[dst + "qkv.w"] = np.concatenate([_permute_heads(get(a + "q_proj.weight"), c.dec_heads, dec_order),
                                           _permute_heads(get(a + "k_proj.weight"), c.dec_heads, dec_order),
                                           get(a + "v_proj.weight")])
        t[dst + "o.w"] = get(a + "o_proj.weight")
        t[dst + "cross_q.w"] = get(x + "q_proj.weight")
        t[dst + "cross_kv.w"] = np.concatenate([get(x + "k_proj.weight"), get(x + "v_proj.weight")])
        t[dst + "cross_o.w"] = get(x + "o_proj.weight")
        t[dst + "attn_ln.g"] = get(src + "input_layernorm.weight")
        t[dst + "cross_ln.g"] = get(src + "post_attention_layernorm.weight")
        t[dst + "mlp_ln.g"] = get(src + "final_layernorm.weight")
        fc1_w, fc1_b = get(src + "mlp.fc1.weight"), get(src + "mlp.fc1.bias")
        t[dst + "up.w"], t[dst + "gate.w"] = fc1_w[:c.d_ffn], fc1_w[c.d_ffn:]
        t[dst + "up.b"], t[dst + "gate.b"] = fc1_b[:c.d_ffn], fc1_b[c.d_ffn:]
        t[dst + "fc2.w"], t[dst + "fc2.b"] = get(src + "mlp.fc2.weight"), get(src + "mlp.fc2.bias")
    return MoonshineCheckpoint(c, t, d.tokenizer())


def is_moonshine_dir(path: Path) -> bool:
    """Whether a folder holds a Moonshine checkpoint (config.json's model_type)."""
    import json

    config = path / "config.json"
    try:
        return config.is_file() and json.loads(config.read_text()).get("model_type") == "moonshine"
    except (OSError, ValueError):
        return False
