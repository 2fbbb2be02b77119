"""Whisper's network on the executor: convolutional front end, encoder, decoder with a self-attention KV cache in GPU
buffers and cross-attention keys/values computed once per 30 s window, and the logits of the rows that need them.

The network (D = d_model, pre-norm blocks, LayerNorm eps 1e-5, exact GELU):

    front (3000 mel frames):  x = gelu(conv1d(mel, k3, pad 1))                    # [3000, D]
    encoder (1500 rows):      x = gelu(conv1d(x, k3, stride 2, pad 1)) + pos       # [1500, D]
                              per layer: x += o(attn(ln(x))); x += fc2(gelu(fc1(ln(x))))
                              enc = ln_post(x); per decoder layer: ckv_l = enc Wkv_l + b  # [1500, 2D], kept
    decoder (T token rows):   x = embed[token] + pos[position]                     # host lookup, [T, D]
                              per layer: x += o(self_attn(ln(x)) over the cache); x += o(cross_attn(ln(x), ckv_l));
                              x += fc2(gelu(fc1(ln(x))))
                              logits = ln(x)[out rows] embed^T                       # [n_out, V], tied head

Every decoder row carries its own cache slot and position: a row's keys and values go to cache row
slot * n_text_ctx + position, and it attends to rows [slot * n_text_ctx, that row] (the span table). Beams are
slots; reordering beams copies cache rows between slots. Decoding (windows, timestamps, fallback, beams, word
timing) lives in models/whisper/decode.py; loading and the model's API in models/whisper/model.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from gpu.ops import encoder as ops
from gpu.ops.conv import conv1d, upload_conv1d
from gpu.ops.full_attention import full_attention
from gpu.ops.logit_groups import logit_group_summary
from gpu.ops.matmul import linear
from gpu.ops.rows import copy_rows, residual_add
from gpu.ops.span_attention import span_attention
from gpu.program import Executor, Program, ProgramBuilder, StepParams
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.weights import Uploader, host_matrix
from models.whisper.weights import WhisperCheckpoint

EPS = 1e-5  # Whisper's LayerNorm epsilon
N_FRAMES = 3000  # mel frames of a 30 s window
TOKEN_BUCKETS = (1, 4, 8, 32, 256)  # decoder rows a step program holds; the largest also keeps alignment inputs
MAX_OUT = 8  # rows of a step that get logits (beams, or the prompt's last row and its <|startoftranscript|>)
MAX_SLOTS = 8  # cache slots (beams)
Progress = Callable[[int, int], None]


@dataclass
class _Layer:
    attn_ln: tuple[Tensor, Tensor]
    qkv: QuantWeight
    qkv_b: Tensor
    o: QuantWeight
    o_b: Tensor
    mlp_ln: tuple[Tensor, Tensor]
    fc1: QuantWeight
    fc1_b: Tensor
    fc2: QuantWeight
    fc2_b: Tensor
    cross_ln: tuple[Tensor, Tensor] | None = None
    cross_q: QuantWeight | None = None
    cross_q_b: Tensor | None = None
    cross_kv: QuantWeight | None = None
    cross_kv_b: Tensor | None = None
    cross_o: QuantWeight | None = None
    cross_o_b: Tensor | None = None


@dataclass
class _DecoderStep:
    program: Program
    t_max: int
    x: Tensor  # f32 [t_max, D] input rows
    kv_pairs: Tensor  # u32 [t_max, 2] (row, cache row)
    spans: Tensor  # u32 [t_max, 2] cache rows each row attends to
    out_pairs: Tensor  # u32 [MAX_OUT, 2] (row, output row)
    logits: Tensor  # f32 [MAX_OUT, V]
    saved_q: Tensor | None  # f32 [t_max, L * D] cross-attention queries (alignment)
    saved_h: Tensor | None  # f32 [t_max, D] final normed rows (token probabilities for alignment)
    params: Tensor  # u32 [2] (ts_lo, ts_hi) of the logit summary
    staging: np.ndarray  # uint8: the host image of the step's input buffer (params, out_pairs, kv_pairs, spans, x)


class WhisperNet:
    """A Whisper checkpoint's weights on the GPU and its programs: encode a window, decode rows of tokens."""

    def __init__(self, executor: Executor, ckpt: WhisperCheckpoint, progress: Progress | None = None) -> None:
        self.executor = ex = executor
        # Asked before every GPU step (an encoder pass, a decoder step); set for the length of a transcription.
        self.should_stop: Callable[[], bool] | None = None
        self.config = c = ckpt.config
        self.tokenizer = ckpt.tokenizer
        self.alignment_heads = ckpt.alignment_heads
        t = ckpt.tensors
        up = Uploader(ex, sum(v.nbytes for v in t.values()), progress)

        def matrix(name: str) -> QuantWeight:
            return up.matrix(name, host_matrix(t[name]))

        def vector(name: str) -> Tensor:
            return up.vector(name, t[name])

        def norm(name: str) -> tuple[Tensor, Tensor]:
            return vector(f"{name}.g"), vector(f"{name}.b")

        self.conv1 = upload_conv1d(ex, "enc.conv1", t["enc.conv1.w"], t["enc.conv1.b"])
        self.conv2 = upload_conv1d(ex, "enc.conv2", t["enc.conv2.w"], t["enc.conv2.b"])
        self.enc_pos = vector("enc.pos")
        self.enc_layers = [
            _Layer(norm(f"enc.{i}.attn_ln"), matrix(f"enc.{i}.qkv.w"), vector(f"enc.{i}.qkv.b"), matrix(f"enc.{i}.o.w"),
                   vector(f"enc.{i}.o.b"), norm(f"enc.{i}.mlp_ln"), matrix(f"enc.{i}.fc1.w"),
                   vector(f"enc.{i}.fc1.b"), matrix(f"enc.{i}.fc2.w"), vector(f"enc.{i}.fc2.b"))
            for i in range(c.n_audio_layers)]
        self.enc_ln = norm("enc.ln")
        self.dec_layers = []
        for i in range(c.n_text_layers):
            p = f"dec.{i}"
            self.dec_layers.append(_Layer(
                norm(f"{p}.attn_ln"), matrix(f"{p}.qkv.w"), vector(f"{p}.qkv.b"), matrix(f"{p}.o.w"),
                vector(f"{p}.o.b"), norm(f"{p}.mlp_ln"), matrix(f"{p}.fc1.w"), vector(f"{p}.fc1.b"),
                matrix(f"{p}.fc2.w"), vector(f"{p}.fc2.b"), norm(f"{p}.cross_ln"), matrix(f"{p}.cross_q.w"),
                vector(f"{p}.cross_q.b"), matrix(f"{p}.cross_kv.w"), vector(f"{p}.cross_kv.b"),
                matrix(f"{p}.cross_o.w"), vector(f"{p}.cross_o.b")))
        self.dec_ln = norm("dec.ln")
        self.embed_weight = matrix("dec.embed")  # the tied output head
        # The decoder's input rows are looked up on the host (float32, as the weights round to).
        self.embed = np.asarray(t["dec.embed"], np.float32)
        self.dec_pos = np.asarray(t["dec.pos"], np.float32)
        self.weight_bytes = up.done

        d, n_ctx = c.d_model, c.n_audio_ctx
        self.mel = ex.tensor("mel", (N_FRAMES, c.n_mels))
        self.front = ex.tensor("front", (N_FRAMES, d))  # conv1 + GELU output, read by the encoder program
        self.enc_out = ex.tensor("enc_out", (n_ctx, d))
        self.cross_kv = [ex.tensor(f"cross_kv{i}", (n_ctx, 2 * d)) for i in range(c.n_text_layers)]
        self.k_cache = [ex.tensor(f"k_cache{i}", (MAX_SLOTS * c.n_text_ctx, d)) for i in range(c.n_text_layers)]
        self.v_cache = [ex.tensor(f"v_cache{i}", (MAX_SLOTS * c.n_text_ctx, d)) for i in range(c.n_text_layers)]
        self._scratch = ex.tensor("cache_scratch", (MAX_SLOTS * c.n_text_ctx, d))
        self._enc_spans = ex.tensor("enc_spans", (n_ctx, 2), "u32",
                                    data=np.tile(np.array([0, n_ctx], np.uint32), (n_ctx, 1)))
        # Greedy steps read a summary of the logits row instead of the row (kernels/logit_group_summary.wgsl).
        self._summary_mask = ex.tensor("summary_mask", (-(-c.vocab_size // 32),), "u32",
                                       data=np.full(-(-c.vocab_size // 32), 0xFFFFFFFF, np.uint32))
        self._summary = ex.tensor("summary", (12,))
        # The encoder runs as a step for the convolutional front and one per layer (cut at _encoder_cuts).
        self._encoder_cuts: list[int] = []
        self._front_program, self._encoder_program = self._record_encoder()
        self._steps: dict[int, _DecoderStep] = {}

    # -- encoder ---------------------------------------------------------------------------------------------------
    def _record_encoder(self) -> tuple[Program, Program]:
        c, ex = self.config, self.executor
        d, n = c.d_model, c.n_audio_ctx
        b = ProgramBuilder(ex, "whisper.front")
        c1 = b.activation("conv1", (N_FRAMES, d))
        conv1d(b, self.conv1, self.mel, c1, t_in=N_FRAMES, padding=1)
        ops.gelu(b, c1, self.front)
        front = b.build()

        b = ProgramBuilder(ex, "whisper.encoder")
        c2 = b.activation("conv2", (n, d))
        conv1d(b, self.conv2, self.front, c2, t_in=N_FRAMES, stride=2, padding=1)
        x = b.activation("x", (n, d))
        ops.gelu(b, c2, x)
        residual_add(b, x, self.enc_pos, None)
        scale = 1.0 / math.sqrt(d // c.n_audio_heads)
        for i, w in enumerate(self.enc_layers):
            self._encoder_cuts.append(len(b._dispatches))
            h = b.activation(f"h{i}", (n, d))
            ops.layer_norm(b, x, w.attn_ln[0], h, EPS, beta=w.attn_ln[1])
            qkv = b.activation(f"qkv{i}", (n, 3 * d))
            linear(b, w.qkv, h, qkv, n)
            ops.bias_add(b, qkv, w.qkv_b)
            a = b.activation(f"attn{i}", (n, d))
            full_attention(b, qkv, a, n, c.n_audio_heads, d // c.n_audio_heads, scale)
            o = b.activation(f"o{i}", (n, d))
            linear(b, w.o, a, o, n)
            residual_add(b, x, o, w.o_b)
            self._mlp(b, x, w, n, f"{i}")
        ops.layer_norm(b, x, self.enc_ln[0], self.enc_out, EPS, beta=self.enc_ln[1])
        for i, w in enumerate(self.dec_layers):
            linear(b, w.cross_kv, self.enc_out, self.cross_kv[i], n)
            ops.bias_add(b, self.cross_kv[i], w.cross_kv_b)
        return front, b.build()

    def _mlp(self, b: ProgramBuilder, x: Tensor, w: _Layer, t: int, tag: str) -> None:
        """x += fc2(gelu(fc1(ln(x))))."""
        c = self.config
        h = b.activation(f"mlp_h{tag}", (t, c.d_model))
        ops.layer_norm(b, x, w.mlp_ln[0], h, EPS, beta=w.mlp_ln[1])
        u = b.activation(f"fc1_{tag}", (t, c.d_ffn))
        linear(b, w.fc1, h, u, t)
        g = b.activation(f"gelu{tag}", (t, c.d_ffn))
        ops.gelu(b, u, g, bias=w.fc1_b)
        down = b.activation(f"fc2_{tag}", (t, c.d_model))
        linear(b, w.fc2, g, down, t)
        residual_add(b, x, down, w.fc2_b)

    def _gpu_step(self) -> AbstractContextManager[None]:
        """One GPU step: refused (concurrent.futures.CancelledError) once should_stop says so, and run while
        holding the adapter's turn (gpu/turns.py), so models on the same GPU take turns between steps."""
        return self.executor.device.turns.stoppable_turn(self.should_stop)

    def encode(self, mel: np.ndarray) -> None:
        """Run the encoder on one window's log-mel [n_mels, 3000]; its cross-attention keys/values stay on the GPU."""
        if mel.shape != (self.config.n_mels, N_FRAMES):
            raise ValueError(f"a window's log-mel must be [{self.config.n_mels}, {N_FRAMES}], not {mel.shape}")
        ex = self.executor
        with self._gpu_step():
            ex.write(self.mel, np.ascontiguousarray(mel.T, np.float32))
            self._run_part(self._front_program, StepParams(n_tokens=N_FRAMES), 0, len(self._front_program.dispatches))
        program = self._encoder_program
        bounds = [*self._encoder_cuts, len(program.dispatches)]
        for start, stop in zip([0, *bounds], bounds):
            if start < stop:
                with self._gpu_step():
                    self._run_part(program, StepParams(n_tokens=self.config.n_audio_ctx), start, stop)

    def _run_part(self, program: Program, params: StepParams, start: int, stop: int) -> None:
        """Dispatches [start, stop) of program; waited for when the device pauses between steps (the turn then
        covers the work, not only its submission), else left running while the next part is recorded."""
        ex = self.executor
        ex.device.queue.write_buffer(ex.step_tensor.buffer, 0, params.pack())  # ordered before the submit below
        submission = ex.submission()
        compute_pass = submission.encoder.begin_compute_pass()
        program.encode(compute_pass, start, stop)
        compute_pass.end()
        if stop < len(program.dispatches) and not ex.device.pauses_between_steps():
            submission.submit()
            return
        submission.read(self.enc_out, nbytes=4)  # only to wait until it has run
        submission.submit().wait()

    def encoder_output(self) -> np.ndarray:
        """The last window's encoder output [1500, D] (tests)."""
        return self.executor.read(self.enc_out)

    def cross_keys(self, layer: int) -> np.ndarray:
        """Cross-attention keys [1500, D] of a decoder layer for the last window (alignment)."""
        return self.executor.read(self.cross_kv[layer])[:, :self.config.d_model]

    # -- decoder ---------------------------------------------------------------------------------------------------
    def _step(self, t_max: int) -> _DecoderStep:
        if t_max in self._steps:
            return self._steps[t_max]
        c, ex = self.config, self.executor
        d = c.d_model
        keep = t_max == TOKEN_BUCKETS[-1]
        tag = f"t{t_max}"
        # The per-step inputs share one buffer, each at an aligned offset, so a step writes them in one call.
        align = ex.device.limits.min_offset_alignment
        views = [(f"params.{tag}", (2,), "u32"), (f"out_pairs.{tag}", (MAX_OUT, 2), "u32"),
                 (f"kv_pairs.{tag}", (t_max, 2), "u32"), (f"spans.{tag}", (t_max, 2), "u32"),
                 (f"dec_x.{tag}", (t_max, d), "f32")]
        offsets, end = [], 0
        for _, shape, _ in views:
            offsets.append(end)
            end = -(-(end + 4 * int(np.prod(shape))) // align) * align
        buffer = ex.device.create_buffer(end, f"decoder_inputs.{tag}")
        params, out_pairs, kv_pairs, spans, x = (Tensor(name, shape, dtype, buffer=buffer, offset=offset)
                                                 for (name, shape, dtype), offset in zip(views, offsets))
        cross_spans = ex.tensor(f"cross_spans.{tag}", (t_max, 2), "u32",
                                data=np.tile(np.array([0, c.n_audio_ctx], np.uint32), (t_max, 1)))
        n_out = min(t_max, MAX_OUT)
        logits = ex.tensor(f"logits.{tag}", (MAX_OUT, c.vocab_size))
        saved_q = ex.tensor(f"saved_q.{tag}", (t_max, c.n_text_layers * d)) if keep else None
        saved_h = ex.tensor(f"saved_h.{tag}", (t_max, d)) if keep else None
        identity = ex.tensor(f"identity.{tag}", (t_max, 2), "u32",
                             data=np.repeat(np.arange(t_max, dtype=np.uint32)[:, None], 2, 1)) if keep else None
        scale = 1.0 / math.sqrt(c.head_dim)
        b = ProgramBuilder(ex, f"whisper.decoder.{tag}")
        h_in = x  # the residual stream: the host writes the input rows into it before each step
        for i, w in enumerate(self.dec_layers):
            h = b.activation(f"h{i}", (t_max, d))
            ops.layer_norm(b, h_in, w.attn_ln[0], h, EPS, beta=w.attn_ln[1])
            qkv = b.activation(f"qkv{i}", (t_max, 3 * d))
            linear(b, w.qkv, h, qkv, t_max)
            ops.bias_add(b, qkv, w.qkv_b)
            copy_rows(b, qkv, kv_pairs, self.k_cache[i], d, src_offset=d)
            copy_rows(b, qkv, kv_pairs, self.v_cache[i], d, src_offset=2 * d)
            a = b.activation(f"attn{i}", (t_max, d))
            span_attention(b, qkv, self.k_cache[i], self.v_cache[i], spans, a, heads=c.n_text_heads,
                              head_dim=c.head_dim, scale=scale, max_keys=c.n_text_ctx)
            o = b.activation(f"o{i}", (t_max, d))
            linear(b, w.o, a, o, t_max)
            residual_add(b, h_in, o, w.o_b)
            ops.layer_norm(b, h_in, w.cross_ln[0], h, EPS, beta=w.cross_ln[1])
            q = b.activation(f"cq{i}", (t_max, d))
            linear(b, w.cross_q, h, q, t_max)
            ops.bias_add(b, q, w.cross_q_b)
            if saved_q is not None:
                copy_rows(b, q, identity, saved_q, d, dst_offset=i * d)
            span_attention(b, q, self.cross_kv[i], self.cross_kv[i], cross_spans, a, heads=c.n_text_heads,
                              head_dim=c.head_dim, scale=scale, max_keys=c.n_audio_ctx, v_offset=d)
            linear(b, w.cross_o, a, o, t_max)
            residual_add(b, h_in, o, w.cross_o_b)
            self._mlp(b, h_in, w, t_max, f"{i}")
        hn = b.activation("hn", (t_max, d))
        ops.layer_norm(b, h_in, self.dec_ln[0], hn, EPS, beta=self.dec_ln[1])
        if saved_h is not None:
            copy_rows(b, hn, identity, saved_h, d)
        sel = b.activation("sel", (MAX_OUT, d))
        copy_rows(b, hn, out_pairs, sel, d, by_out=True)
        linear(b, self.embed_weight, sel, logits, n_out)
        logit_group_summary(b, logits, self._summary_mask, params, self._summary,
                           eot=self.tokenizer.eot, timestamp_begin=self.tokenizer.timestamp_begin)
        step = _DecoderStep(b.build(), t_max, x, kv_pairs, spans, out_pairs, logits, saved_q, saved_h, params,
                            np.zeros(end, np.uint8))
        self._steps[t_max] = step
        return step

    def decode(self, tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int], out_rows: Sequence[int],
               *, keep: bool = False) -> np.ndarray:
        """Run token rows through the decoder (each at its position in its cache slot, after the rows before it
        in that slot) and return the logits of out_rows: float32 [len(out_rows), V]. keep: use the largest
        program, whose cross-attention queries and final rows stay readable (saved_alignment_inputs)."""
        n = len(tokens)
        if not 0 < n <= TOKEN_BUCKETS[-1] or not 0 < len(out_rows) <= MAX_OUT:
            raise ValueError(f"{n} rows and {len(out_rows)} output rows (at most {TOKEN_BUCKETS[-1]} and {MAX_OUT})")
        c, ex = self.config, self.executor
        positions = np.asarray(positions, np.int64)
        if positions.max() >= c.n_text_ctx:
            raise ValueError(f"position {positions.max()} is past the decoder's {c.n_text_ctx}")
        # The head computes as many rows as the step has tokens: repeated output rows are gathered once.
        unique, where = np.unique(np.asarray(out_rows, np.int64), return_inverse=True)
        if len(unique) > n:
            raise ValueError(f"{len(unique)} distinct output rows for {n} token rows")
        step = self._step(TOKEN_BUCKETS[-1] if keep else next(t for t in TOKEN_BUCKETS if t >= n))
        with self._gpu_step():
            self._write_inputs(step, tokens, positions, slots, unique)
            submission = ex.submission()
            submission.step(step.program, StepParams(n_tokens=n, n_out=len(unique)))
            submission.read(step.logits, nbytes=len(unique) * c.vocab_size * 4)  # only the rows asked for
            logits, = submission.submit().wait()
        return logits.reshape(len(unique), c.vocab_size)[where.reshape(-1)]

    def _write_inputs(self, step: _DecoderStep, tokens: Sequence[int], positions: np.ndarray, slots: Sequence[int],
                      out_rows: np.ndarray, ts_range: tuple[int, int] = (0, 0)) -> None:
        """Fill the step's input buffer (one queue write): summary params, output rows, cache rows, spans, x."""
        c, n = self.config, len(tokens)
        rows = np.asarray(slots, np.int64) * c.n_text_ctx + positions
        parts = [(step.params, np.asarray(ts_range, np.uint32)),
                 (step.out_pairs, np.stack([out_rows, np.arange(len(out_rows))], 1).astype(np.uint32)),
                 (step.kv_pairs, np.stack([np.arange(n), rows], 1).astype(np.uint32)),
                 (step.spans, np.stack([np.asarray(slots) * c.n_text_ctx, rows + 1], 1).astype(np.uint32)),
                 (step.x, (self.embed[np.asarray(tokens, np.int64)] + self.dec_pos[positions]).astype(np.float32))]
        staging = step.staging
        for tensor, values in parts:
            raw = values.reshape(-1).view(np.uint8)
            staging[tensor.offset:tensor.offset + raw.nbytes] = raw
        end = step.x.offset + parts[-1][1].nbytes
        self.executor.device.write(step.x.buffer, staging[:end], "decoder inputs")

    def set_summary_mask(self, allowed: np.ndarray) -> None:
        """The tokens decode_summary may pick (bool [V]): the suppressed ones cleared."""
        bits = np.packbits(np.asarray(allowed, bool), bitorder="little")
        bits = np.pad(bits, (0, (-len(bits)) % 4))
        self.executor.write(self._summary_mask, bits.view(np.uint32))

    def decode_summary(self, token: int, position: int, slot: int, ts_lo: int, ts_hi: int) -> np.ndarray:
        """One decoder row, then per token group (text, <|endoftext|>, other specials, timestamps [ts_lo, ts_hi])
        the (max logit, its token, log-sum-exp) over the allowed tokens: float64 [4, 3] (48 bytes come back)."""
        step = self._step(1)
        with self._gpu_step():
            self._write_inputs(step, [token], np.array([position]), [slot], np.zeros(1, np.int64), (ts_lo, ts_hi))
            out, = self.executor.run(step.program, StepParams(n_tokens=1, n_out=1), read=[self._summary])
        stats = out.astype(np.float64).reshape(4, 3)
        stats[:, 1] = out.reshape(4, 3)[:, 1].view(np.uint32)
        return stats

    def saved_alignment_inputs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(cross-attention queries [n, L, D], final normed rows [n, D]) of the last decode(keep=True)."""
        step = self._steps[TOKEN_BUCKETS[-1]]
        q = self.executor.read(step.saved_q)[:n].reshape(n, self.config.n_text_layers, self.config.d_model)
        return q, self.executor.read(step.saved_h)[:n]

    def reorder_slots(self, sources: Sequence[int], length: int) -> None:
        """Cache slot b takes the first `length` rows of slot sources[b] (beam search keeps its survivors)."""
        c = self.config
        row_bytes = c.d_model * 4
        nbytes = length * row_bytes
        if nbytes == 0 or list(sources) == list(range(len(sources))):
            return
        submission = self.executor.submission()
        slot_bytes = c.n_text_ctx * row_bytes
        for cache in self.k_cache + self.v_cache:
            for b, s in enumerate(sources):
                submission.copy(cache, self._scratch, nbytes, s * slot_bytes, b * slot_bytes)
            for b in range(len(sources)):
                submission.copy(self._scratch, cache, nbytes, b * slot_bytes, b * slot_bytes)
        submission.submit().wait()

