"""Ops over activations whose lengths change every call: a graph of dispatches sized by params, not constants.

A speech model's lengths (tokens, frames, samples) differ per sentence, so sizes are not specialisation constants
(that would compile new pipelines for every length) but params: each dispatch gets a 64-word block of u32
in one buffer per program (`@binding(0) var<storage, read> p: array<u32>`; word 63 stays 0, which kernels
use to keep every binding alive). Constants carry only what a layer fixes (taps, activation, fusions).

    g = DynamicGraph(executor, "kokoro.front")
    y = g.act((T, N)); g.linear(x, w, b, y, rows=T, k=K, n=N)
    program = g.build(); executor.run(program, StepParams(1), read=[y])

Layouts: "row" is [T, C] row-major, "cm" channel-major [C, T] (conv stacks); the linear, LSTM and gather
kernels take strides so either layout feeds either.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from gpu.program import Executor, Program, ProgramBuilder, workgroup_grid
from gpu.tensor import Lifetime, Tensor

PARAM_WORDS = 64  # u32 words per dispatch's params block (256 bytes: the storage offset alignment)


def _word(v: int | float) -> int:
    if isinstance(v, float):
        return struct.unpack("<I", struct.pack("<f", v))[0]
    return int(v) & 0xFFFFFFFF


def _groups(n: int, per: int) -> int:
    return max(1, -(-n // per))


class DynamicGraph:
    """A ProgramBuilder plus the params of each dispatch; `build()` uploads the params and binds everything."""

    def __init__(self, executor: Executor, name: str) -> None:
        self.executor = executor
        self.builder = ProgramBuilder(executor, name)
        self._params: list[list[int]] = []
        self._views: list[Tensor] = []
        self.dummy = executor.tensor(f"{name}.dummy", (4,))  # bound where a kernel's optional input is unused

    def act(self, shape: Sequence[int], name: str = "a", dtype: str = "f32") -> Tensor:
        return self.builder.activation(f"{name}{len(self.builder._activations)}", shape, dtype)

    def dispatch(self, kernel: str, constants: dict, params: Sequence[int | float], tensors: Sequence[Tensor],
                 workgroups: Sequence[int]) -> None:
        if len(params) >= PARAM_WORDS:
            raise ValueError(f"{kernel}: {len(params)} params exceed the block")
        view = Tensor(f"{self.builder.name}.p{len(self._params)}", (PARAM_WORDS,), "u32", Lifetime.PERSISTENT)
        self._params.append([_word(v) for v in params])
        self._views.append(view)
        self.builder.dispatch(kernel, constants, [view, *tensors], workgroups)

    def build(self) -> Program:
        block = np.zeros((max(1, len(self._params)), PARAM_WORDS), np.uint32)
        for i, words in enumerate(self._params):
            block[i, : len(words)] = words
        buffer = self.executor.device.upload(block, f"{self.builder.name}.params")
        for i, view in enumerate(self._views):
            view.buffer, view.offset = buffer, i * PARAM_WORDS * 4
        self.params_buffer = buffer
        return self.builder.build()

    # -- ops -------------------------------------------------------------------------------------
    def linear(self, x: Tensor, w: Tensor, b: Tensor, y: Tensor, *, rows: int, k: int, n: int,
               x_strides: tuple[int, int] | None = None, y_strides: tuple[int, int] | None = None,
               y_offset: int = 0, gelu: bool = False, residual: Tensor | None = None) -> None:
        """y[t, n] = x[t] . wt[:, n] + b[n] (+ gelu) (+ residual); w is the transposed Linear weight wt [K, N];
        strides (per row, per channel) default row-major."""
        xs = x_strides or (k, 1)
        ys = y_strides or (n, 1)
        consts = {"ACT": 1 if gelu else 0, "RESIDUAL": residual is not None}
        self.dispatch("linear_strided", consts, [rows, k, n, xs[0], xs[1], ys[0], ys[1], y_offset],
                      [x, w, b, residual if residual is not None else self.dummy, y],
                      (_groups(n, 64), _groups(rows, 8)))

    def conv1d(self, x: Tensor, w: Tensor, b: Tensor, y: Tensor, *, c_in: int, c_out: int, t_in: int, k: int,
               stride: int = 1, pad: int = 0, dilation: int = 1, pre_slope: float | None = None,
               residual: Tensor | None = None, r_shift: int = 0, scale: float = 1.0, x_offset: int = 0,
               y_offset: int = 0, r_offset: int = 0) -> int:
        """Channel-major conv1d (kernels/conv1d_channel_major.wgsl, or its tiled variant where the window fits);
        returns T_out."""
        t_out = (t_in + 2 * pad - dilation * (k - 1) - 1) // stride + 1
        consts = {"K": k, "PRE_ACT": pre_slope is not None, "RESIDUAL": residual is not None, "R_SHIFT": r_shift}
        params = [c_in, c_out, t_in, t_out, stride, pad, dilation, float(pre_slope or 0.0), float(scale),
                  x_offset, y_offset, r_offset]
        tensors = [x, w, b, residual if residual is not None else self.dummy, y]
        if stride == 1 and (k - 1) * dilation <= 64 and k <= 16:  # the tiled kernel's window and weight tile
            self.dispatch("conv1d_channel_major_tiled", consts, params, tensors,
                          (_groups(t_out, 128), _groups(c_out, 8)))
        else:
            self.dispatch("conv1d_channel_major", consts, params, tensors, (_groups(t_out, 64), _groups(c_out, 4)))
        return t_out

    def conv_transpose1d(self, x: Tensor, w: Tensor, b: Tensor, y: Tensor, *, c_in: int, c_out: int, t_in: int,
                         k: int, stride: int, pad: int, output_padding: int = 0, depthwise: bool = False,
                         pre_slope: float | None = None, residual: Tensor | None = None,
                         reflect_left: bool = False) -> int:
        """Channel-major ConvTranspose1d (kernels/conv_transpose1d.wgsl); returns the columns written. w: [C, 1, K]
        when depthwise, else PyTorch's [C_in, C_out, K] transposed to [C_in, K, C_out]."""
        t_out = (t_in - 1) * stride - 2 * pad + k + output_padding
        cols = t_out + (1 if reflect_left else 0)
        consts = {"K": k, "DEPTHWISE": depthwise, "PRE_ACT": pre_slope is not None,
                  "RESIDUAL": residual is not None, "REFLECT_LEFT": reflect_left}
        self.dispatch("conv_transpose1d", consts, [c_in, c_out, t_in, t_out, stride, pad, float(pre_slope or 0.0)],
                      [x, w, b, residual if residual is not None else self.dummy, y],
                      (_groups(cols, 64), _groups(c_out, 4)))
        return cols

    def norm(self, x: Tensor, out: Tensor, *, groups: int, n: int, elem_stride: int, group_stride: int,
             eps: float = 1e-5, by_group: bool, gamma: Tensor | None = None, beta: Tensor | None = None,
             style_h: Tensor | None = None, channels: int = 0, leaky: float | None = None,
             snake_alpha: Tensor | None = None) -> None:
        """Instance/layer norm with plain or style affine and LeakyReLU or Snake (kernels/adain.wgsl)."""
        affine = 2 if style_h is not None else (1 if gamma is not None else 0)
        act = 2 if snake_alpha is not None else (1 if leaky is not None else 0)
        w0 = style_h if style_h is not None else (gamma if gamma is not None else self.dummy)
        w1 = snake_alpha if snake_alpha is not None else (beta if beta is not None else self.dummy)
        self.dispatch("adain", {"AFFINE": affine, "ACT": act, "BY_GROUP": by_group},
                      [groups, n, elem_stride, group_stride, float(eps), float(leaky or 0.0), channels],
                      [x, w0, w1, out], (groups,))

    def lstm(self, gx: Tensor, whh: Tensor, y: Tensor, *, steps: int, y_strides: tuple[int, int],
             y_offset: int = 0) -> None:
        """Bidirectional LSTM recurrence over precomputed input gates gx [T, 8H] (kernels/lstm.wgsl)."""
        self.dispatch("lstm", {}, [steps, y_strides[0], y_strides[1], y_offset], [gx, whh, y], (2,))

    def gather(self, ids: Tensor, src: Tensor, out: Tensor, *, rows: int, channels: int,
               out_strides: tuple[int, int] | None = None, out_offset: int = 0, src_stride: int | None = None) -> None:
        """out[f, c] = src[ids[f], c] through strides (kernels/gather_strided.wgsl)."""
        os_ = out_strides or (channels, 1)
        self.dispatch("gather_strided", {}, [rows, channels, os_[0], os_[1], out_offset, src_stride or channels],
                      [ids, src, out], workgroup_grid(_groups(rows * channels, 256)))

    def axpby(self, x: Tensor, y: Tensor, out: Tensor, *, n: int, a: float = 1.0, b: float = 1.0, div: float = 1.0,
              x_offset: int = 0, y_offset: int = 0, out_offset: int = 0) -> None:
        """out = (a x + b y) / div over n elements (kernels/axpby.wgsl)."""
        self.dispatch("axpby", {}, [n, float(a), float(b), float(div), x_offset, y_offset, out_offset],
                      [x, y, out], workgroup_grid(_groups(n, 256)))

    def attention(self, qkv: Tensor, out: Tensor, *, rows: int, heads: int) -> None:
        """Unmasked self-attention over rows from fused q | k | v (kernels/attention_full_dynamic.wgsl)."""
        self.dispatch("attention_full_dynamic", {}, [rows, heads], [qkv, out], (rows, heads))

    def duration(self, x: Tensor, out: Tensor, *, rows: int, bins: int, speed: float) -> None:
        """out[t] = sum of sigmoid over x's bins of row t, divided by speed (kernels/sigmoid_row_sum.wgsl)."""
        self.dispatch("sigmoid_row_sum", {}, [rows, bins, float(speed)], [x, out], (_groups(rows, 64),))

    def harmonic_source(self, f0: Tensor, phase: Tensor, lin: Tensor, har: Tensor, *, frames: int, upsample: int,
                        seed: int, noise: bool) -> int:
        """istftnet's harmonic-plus-noise source at sample rate (sine_phase + sine_source); returns samples."""
        self.dispatch("sine_phase", {}, [frames, float(upsample)], [f0, phase], (1,))
        n = frames * upsample
        scale = float(np.float32(1.0 / upsample))
        self.dispatch("sine_source", {}, [frames, n, upsample, scale, seed & 0xFFFFFFFF, 1.0 if noise else 0.0],
                      [f0, phase, lin, har], workgroup_grid(_groups(n, 256)))
        return n

    def stft(self, x: Tensor, out: Tensor, *, samples: int, hop: int = 5) -> int:
        """Magnitude and phase rows of the n_fft-20 STFT of x (kernels/stft.wgsl); returns frames."""
        frames = samples // hop + 1
        self.dispatch("stft", {}, [samples, frames], [x, out], workgroup_grid(_groups(frames * 11, 256)))
        return frames

    def istft(self, x: Tensor, y: Tensor, *, frames: int, hop: int = 5) -> int:
        """Samples from magnitude and phase rows (kernels/istft.wgsl); returns their count."""
        n = (frames - 1) * hop
        self.dispatch("istft", {}, [frames, n], [x, y], workgroup_grid(_groups(n, 256)))
        return n
