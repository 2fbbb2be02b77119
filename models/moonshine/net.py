"""Moonshine's network on the executor: a convolutional stem over raw 16 kHz audio, a RoPE transformer encoder, and a
decoder with a self-attention KV cache in GPU buffers and cross-attention keys/values computed once per window.

The network (D = hidden_size, pre-norm blocks, LayerNorms without bias, eps 1e-5, exact GELU):

    stem (S samples):      c1 = conv1d(audio, k127, stride 64)                        # [S1, D], no bias
                           g = groupnorm_1(tanh(c1)); c2 = gelu(conv1d(g, k7, s3))   # [S2, 2D]
                           x = gelu(conv1d(c2, k3, s2))                              # [N, D]
    encoder (N rows):      per layer: x += o(attn(rope(qkv(ln(x))))); x += fc2(gelu(fc1(ln(x))))
                           enc = ln(x); per decoder layer: ckv_l = enc Wkv_l            # [N, 2D], kept
    decoder (1 row a step): x = embed[token]
                           per layer: x += o(self_attn(rope(qkv(ln(x)))) over the cache)
                                      x += o(cross_attn(ln(x), ckv_l))
                           x += fc2(silu(gate(ln(x))) * up(ln(x)))
                           logits = ln(x) embed^T                                     # tied head

Lengths change with the audio, so the stem and encoder run as four programs, each sized for the longest window and
told its row count through the step's n_tokens (samples, S1, S2, N). RoPE pairs are NeoX's on weights permuted at
load (models/moonshine/checkpoint.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from gpu.ops import encoder as ops
from gpu.ops.conv import conv1d, conv1d_out_len, upload_conv1d
from gpu.ops.matmul import linear
from gpu.ops.rows import copy_rows, residual_add
from gpu.ops.span_attention import span_attention
from gpu.ops.transformer import glu_mul
from gpu.program import Executor, Program, ProgramBuilder, StepParams
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.weights import Uploader, host_matrix
from models.moonshine.checkpoint import MoonshineCheckpoint, rope_table

EPS = 1e-5  # LayerNorm and GroupNorm epsilon
SAMPLE_RATE = 16000
STEM = ((127, 64), (7, 3), (3, 2))  # (kernel, stride) of conv1, conv2, conv3
Progress = Callable[[int, int], None]


def frames(samples: int) -> tuple[int, int, int]:
    """Rows after conv1, conv2 and conv3 of a window of `samples` (0 where it is too short)."""
    s1 = conv1d_out_len(samples, *STEM[0])
    s2 = conv1d_out_len(s1, *STEM[1])
    return s1, s2, conv1d_out_len(s2, *STEM[2])


@dataclass
class _Layer:
    attn_ln: Tensor
    qkv: QuantWeight
    o: QuantWeight
    mlp_ln: Tensor
    fc2: QuantWeight
    fc2_b: Tensor
    fc1: QuantWeight | None = None  # encoder
    fc1_b: Tensor | None = None
    up: QuantWeight | None = None  # decoder
    up_b: Tensor | None = None
    gate: QuantWeight | None = None
    gate_b: Tensor | None = None
    cross_ln: Tensor | None = None
    cross_q: QuantWeight | None = None
    cross_kv: QuantWeight | None = None
    cross_o: QuantWeight | None = None


class MoonshineNet:
    """A Moonshine checkpoint's weights on the GPU and its programs: encode a window of audio, decode one token."""

    def __init__(self, executor: Executor, ckpt: MoonshineCheckpoint, max_samples: int,
                 progress: Progress | None = None) -> None:
        self.executor = ex = executor
        self.should_stop: Callable[[], bool] | None = None  # asked before every GPU step, set per transcription
        self.config = c = ckpt.config
        self.tokenizer = ckpt.tokenizer
        self.max_samples = max_samples
        self.max_frames = frames(max_samples)
        t = ckpt.tensors
        up = Uploader(ex, sum(v.nbytes for v in t.values()), progress)
        self.weight_bytes = sum(v.nbytes for v in t.values())

        def matrix(name: str) -> QuantWeight:
            return up.matrix(name, host_matrix(t[name]))

        def vector(name: str) -> Tensor:
            return up.vector(name, t[name])

        d = c.d_model
        self.zeros = up.vector("zeros", np.zeros(d, np.float32))  # the beta of LayerNorms without bias
        self.conv1 = upload_conv1d(ex, "conv1", t["conv1.w"])
        self.conv2 = upload_conv1d(ex, "conv2", t["conv2.w"], t["conv2.b"])
        self.conv3 = upload_conv1d(ex, "conv3", t["conv3.w"], t["conv3.b"])
        self.gn = vector("gn.g"), vector("gn.b")
        self.enc_ln, self.dec_ln = vector("enc.ln.g"), vector("dec.ln.g")
        self.enc_layers = [
            _Layer(vector(f"enc.{i}.attn_ln.g"), matrix(f"enc.{i}.qkv.w"), matrix(f"enc.{i}.o.w"),
                   vector(f"enc.{i}.mlp_ln.g"), matrix(f"enc.{i}.fc2.w"), vector(f"enc.{i}.fc2.b"),
                   fc1=matrix(f"enc.{i}.fc1.w"), fc1_b=vector(f"enc.{i}.fc1.b"))
            for i in range(c.enc_layers)]
        self.dec_layers = [
            _Layer(vector(f"dec.{i}.attn_ln.g"), matrix(f"dec.{i}.qkv.w"), matrix(f"dec.{i}.o.w"),
                   vector(f"dec.{i}.mlp_ln.g"), matrix(f"dec.{i}.fc2.w"), vector(f"dec.{i}.fc2.b"),
                   up=matrix(f"dec.{i}.up.w"), up_b=vector(f"dec.{i}.up.b"), gate=matrix(f"dec.{i}.gate.w"),
                   gate_b=vector(f"dec.{i}.gate.b"), cross_ln=vector(f"dec.{i}.cross_ln.g"),
                   cross_q=matrix(f"dec.{i}.cross_q.w"), cross_kv=matrix(f"dec.{i}.cross_kv.w"),
                   cross_o=matrix(f"dec.{i}.cross_o.w"))
            for i in range(c.dec_layers)]
        self.embed = t["embed"]  # host copy: the decoder's input rows are looked up on the host
        self.head = matrix("embed")

        s1, s2, n = self.max_frames
        self.audio = ex.tensor("audio", (max_samples, 1))
        self.c1 = ex.tensor("c1", (s1, d))
        self.c2 = ex.tensor("c2", (s2, 2 * d))
        self.c3 = ex.tensor("c3", (n, d))
        self.enc_out = ex.tensor("enc_out", (n, d))
        self.cross_kv = [ex.tensor(f"cross_kv{i}", (n, 2 * d)) for i in range(c.dec_layers)]
        self.enc_positions = ex.tensor("enc_positions", (n,), "u32", data=np.arange(n, dtype=np.uint32))
        self.enc_spans = ex.tensor("enc_spans", (n, 2), "u32")
        self.cross_spans = ex.tensor("cross_spans", (1, 2), "u32")
        self.enc_rope = ex.tensor("enc_rope", (n, c.enc_head_dim), data=rope_table(
            c.enc_head_dim, c.rotary_factor, c.rope_theta, n))
        self.dec_rope = ex.tensor("dec_rope", (c.n_text_ctx, c.dec_head_dim), data=rope_table(
            c.dec_head_dim, c.rotary_factor, c.rope_theta, c.n_text_ctx))
        self.k_cache = [ex.tensor(f"k_cache{i}", (c.n_text_ctx, d)) for i in range(c.dec_layers)]
        self.v_cache = [ex.tensor(f"v_cache{i}", (c.n_text_ctx, d)) for i in range(c.dec_layers)]
        # The decoder's per-step inputs: its row, position, (row, cache row) pair and self-attention span.
        self.dec_x = ex.tensor("dec_x", (1, d))
        self.dec_position = ex.tensor("dec_position", (1,), "u32")
        self.dec_kv_pair = ex.tensor("dec_kv_pair", (1, 2), "u32")
        self.dec_span = ex.tensor("dec_span", (1, 2), "u32")
        self.n_frames = 0
        self._stem = self._record_stem()
        self._encoder = self._record_encoder()
        self._decoder = self._record_decoder()

    # -- encoder ---------------------------------------------------------------------------------------------------
    def _record_stem(self) -> list[Program]:
        d = self.config.d_model
        s1, s2, _ = self.max_frames
        b = ProgramBuilder(self.executor, "moonshine.conv1")  # n_tokens: samples
        conv1d(b, self.conv1, self.audio, self.c1, t_in=None, stride=STEM[0][1])
        first = b.build()
        b = ProgramBuilder(self.executor, "moonshine.conv2")  # n_tokens: S1
        g = b.activation("gn", (s1, d))
        ops.group_norm(b, self.c1, self.gn[0], self.gn[1], g, eps=EPS, tanh=True)
        conv1d(b, self.conv2, g, self.c2, t_in=None, stride=STEM[1][1])
        second = b.build()
        b = ProgramBuilder(self.executor, "moonshine.conv3")  # n_tokens: S2
        h = b.activation("gelu2", (s2, 2 * d))
        ops.gelu(b, self.c2, h)
        conv1d(b, self.conv3, h, self.c3, t_in=None, stride=STEM[2][1])
        return [first, second, b.build()]

    def _record_encoder(self) -> Program:
        c = self.config
        d, n, hd = c.d_model, self.max_frames[2], c.enc_head_dim
        b = ProgramBuilder(self.executor, "moonshine.encoder")  # n_tokens: N
        x = b.activation("x", (n, d))
        ops.gelu(b, self.c3, x)
        for i, w in enumerate(self.enc_layers):
            h = b.activation(f"h{i}", (n, d))
            ops.layer_norm(b, x, w.attn_ln, h, EPS, beta=self.zeros)
            qkv = b.activation(f"qkv{i}", (n, 3 * d))
            linear(b, w.qkv, h, qkv, n)
            ops.rope(b, qkv, self.enc_rope, self.enc_positions, heads=2 * c.enc_heads, head_dim=hd)  # q and k
            a = b.activation(f"attn{i}", (n, d))
            ops.attention(b, qkv, qkv, qkv, self.enc_spans, a, heads=c.enc_heads, kv_heads=c.enc_heads, head_dim=hd,
                          scale=hd ** -0.5, offsets=(0, d, 2 * d))
            o = b.activation(f"o{i}", (n, d))
            linear(b, w.o, a, o, n)
            residual_add(b, x, o, None)
            ops.layer_norm(b, x, w.mlp_ln, h, EPS, beta=self.zeros)
            u = b.activation(f"fc1_{i}", (n, c.d_ffn))
            linear(b, w.fc1, h, u, n)
            g = b.activation(f"gelu{i}", (n, c.d_ffn))
            ops.gelu(b, u, g, bias=w.fc1_b)
            linear(b, w.fc2, g, o, n)
            residual_add(b, x, o, w.fc2_b)
        ops.layer_norm(b, x, self.enc_ln, self.enc_out, EPS, beta=self.zeros)
        for i, w in enumerate(self.dec_layers):
            linear(b, w.cross_kv, self.enc_out, self.cross_kv[i], n)
        return b.build()

    def _gpu_step(self) -> AbstractContextManager[None]:
        """One GPU step: refused (concurrent.futures.CancelledError) once should_stop says so, and run while
        holding the adapter's turn (gpu/turns.py), so models on the same GPU take turns between steps."""
        return self.executor.device.turns.stoppable_turn(self.should_stop)

    def encode(self, audio: np.ndarray) -> int:
        """Run the stem and encoder on one window of float32 16 kHz samples; its cross-attention keys/values stay on
        the GPU. Returns the encoder's rows."""
        samples = audio.size
        if not 0 < samples <= self.max_samples:
            raise ValueError(f"a window holds 1 to {self.max_samples} samples, not {samples}")
        s1, s2, n = frames(samples)
        if n < 1:
            raise ValueError(f"{samples} samples are too few for Moonshine's stem")
        ex = self.executor
        ex.write(self.audio, np.ascontiguousarray(audio, np.float32).reshape(-1, 1))
        ex.write(self.enc_spans, np.tile(np.array([0, n], np.uint32), (n, 1)))
        ex.write(self.cross_spans, np.array([[0, n]], np.uint32))
        for program, rows in zip([*self._stem, self._encoder], (samples, s1, s2, n)):
            with self._gpu_step():
                ex.run(program, StepParams(n_tokens=rows))
        self.n_frames = n
        return n

    def encoder_output(self) -> np.ndarray:
        """The last window's encoder output [N, D] (tests)."""
        return self.executor.read(self.enc_out)[:self.n_frames]

    # -- decoder ---------------------------------------------------------------------------------------------------
    def _record_decoder(self) -> Program:
        c, ex = self.config, self.executor
        d, hd, v = c.d_model, c.dec_head_dim, c.vocab_size
        positions, kv_pairs, spans = self.dec_position, self.dec_kv_pair, self.dec_span
        self.logits = ex.tensor("logits", (1, v))
        b = ProgramBuilder(ex, "moonshine.decoder")
        x = self.dec_x
        for i, w in enumerate(self.dec_layers):
            h = b.activation(f"h{i}", (1, d))
            ops.layer_norm(b, x, w.attn_ln, h, EPS, beta=self.zeros)
            qkv = b.activation(f"qkv{i}", (1, 3 * d))
            linear(b, w.qkv, h, qkv, 1)
            ops.rope(b, qkv, self.dec_rope, positions, heads=2 * c.dec_heads, head_dim=hd)
            copy_rows(b, qkv, kv_pairs, self.k_cache[i], d, src_offset=d)
            copy_rows(b, qkv, kv_pairs, self.v_cache[i], d, src_offset=2 * d)
            a = b.activation(f"attn{i}", (1, d))
            span_attention(b, qkv, self.k_cache[i], self.v_cache[i], spans, a, heads=c.dec_heads, head_dim=hd,
                           scale=hd ** -0.5, max_keys=c.n_text_ctx)
            o = b.activation(f"o{i}", (1, d))
            linear(b, w.o, a, o, 1)
            residual_add(b, x, o, None)
            ops.layer_norm(b, x, w.cross_ln, h, EPS, beta=self.zeros)
            q = b.activation(f"cq{i}", (1, d))
            linear(b, w.cross_q, h, q, 1)
            span_attention(b, q, self.cross_kv[i], self.cross_kv[i], self.cross_spans, a, heads=c.dec_heads,
                           head_dim=hd, scale=hd ** -0.5, max_keys=self.max_frames[2], v_offset=d)
            linear(b, w.cross_o, a, o, 1)
            residual_add(b, x, o, None)
            ops.layer_norm(b, x, w.mlp_ln, h, EPS, beta=self.zeros)
            up_, gate = b.activation(f"up{i}", (1, c.d_ffn)), b.activation(f"gate{i}", (1, c.d_ffn))
            linear(b, w.up, h, up_, 1)
            ops.bias_add(b, up_, w.up_b)
            linear(b, w.gate, h, gate, 1)
            ops.bias_add(b, gate, w.gate_b)
            m = b.activation(f"swiglu{i}", (1, c.d_ffn))
            glu_mul(b, gate, up_, m, "silu")
            linear(b, w.fc2, m, o, 1)
            residual_add(b, x, o, w.fc2_b)
        hn = b.activation("hn", (1, d))
        ops.layer_norm(b, x, self.dec_ln, hn, EPS, beta=self.zeros)
        linear(b, self.head, hn, self.logits, 1)
        return b.build()

    def decode(self, token: int, position: int) -> np.ndarray:
        """One token through the decoder at `position` (after positions 0..position-1 of this window): its logits,
        float32 [V]."""
        if not 0 <= position < self.config.n_text_ctx:
            raise ValueError(f"position {position} is past the decoder's {self.config.n_text_ctx}")
        ex = self.executor
        with self._gpu_step():
            ex.write(self.dec_x, self.embed[token][None])
            ex.write(self.dec_position, np.array([position], np.uint32))
            ex.write(self.dec_kv_pair, np.array([[0, position]], np.uint32))
            ex.write(self.dec_span, np.array([[0, position + 1]], np.uint32))
            logits, = ex.run(self._decoder, StepParams(n_tokens=1), read=[self.logits])
        return logits.reshape(-1)
