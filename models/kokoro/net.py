"""Kokoro's two programs, recorded per call for its lengths (see models/kokoro/model.py).

front(): ALBERT -> bert_encoder -> DurationEncoder (3 x BiLSTM + AdaLayerNorm) -> BiLSTM -> duration_proj ->
durations (rounded on the host); the text encoder (3 x conv + LayerNorm + LeakyReLU, BiLSTM) runs alongside.
back(): alignment -> shared BiLSTM -> F0 / N AdainResBlk1d stacks -> decoder (encode, 4 decode blocks) ->
generator (harmonic source, STFT, 2 x (ConvTranspose + noise branch + 3 Snake resblocks), conv_post, iSTFT).
Shape comments: rows [T, C], channel-major [C, T]. Each program runs in steps cut between its stages (_cut), with
the adapter's turn held per step and a stop check before each (KokoroWeights.run).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpu.ops.dynamic import DynamicGraph
from gpu.tensor import Tensor
from models.kokoro.weights import KokoroConfig, KokoroWeights

LN_EPS_BERT = 1e-12  # ALBERT's layer_norm_eps
LEAKY = 0.2  # acoustic blocks' LeakyReLU


def _cut(g: DynamicGraph, cuts: list[int]) -> None:
    """End a step here: the dispatches recorded so far run before the next step's (KokoroWeights.run)."""
    cuts.append(len(g._params))  # one params block per dispatch


def _style_h(g: DynamicGraph, m: KokoroWeights, s: Tensor, fc: str, channels: int) -> Tensor:
    """h = fc(s): [2C], gamma then beta of an AdaIN / AdaLayerNorm."""
    h = g.act((2 * channels,), "h")
    g.linear(s, m.w(fc + ".weight"), m.w(fc + ".bias"), h, rows=1, k=m.config.style_dim, n=2 * channels)
    return h


def _bilstm(g: DynamicGraph, m: KokoroWeights, x: Tensor, name: str, y: Tensor, *, steps: int, k: int,
            x_strides: tuple[int, int], y_strides: tuple[int, int]) -> None:
    gx = g.act((steps, 8 * 256), "gx")  # [T, 8H]: both directions' input gates
    g.linear(x, m.w(name + ".wih"), m.w(name + ".b"), gx, rows=steps, k=k, n=8 * 256, x_strides=x_strides)
    g.lstm(gx, m.w(name + ".whh"), y, steps=steps, y_strides=y_strides)


def front(m: KokoroWeights, ids: np.ndarray, style: np.ndarray, speed: float,
          should_stop: Callable[[], bool] | None = None) -> np.ndarray:
    """Durations (frames per token, int64) for the wrapped ids; leaves d and t_en in m's persistent tensors. Runs
    in steps (each of ALBERT's layers, the prosody encoder, the durations, the text encoder), asking should_stop
    before each."""
    c = m.config
    t = len(ids)
    g = DynamicGraph(m.executor, "kokoro.front")
    cuts: list[int] = []
    ex = m.executor
    ids_t = ex.tensor("kokoro.ids", (t,), "u32", data=ids)
    pos_t = ex.tensor("kokoro.pos", (t,), "u32", data=np.arange(t, dtype=np.uint32))
    zero_ids = ex.tensor("kokoro.zero_ids", (t,), "u32")
    s_pred = ex.tensor("kokoro.s_pred", (1, c.style_dim), data=style[c.style_dim:])
    e_dim, d_b = 128, c.bert_hidden

    # ALBERT: embeddings (word + position + token type 0), LayerNorm, mapping to 768, one shared layer x 12.
    e1, e2, e = g.act((t, e_dim)), g.act((t, e_dim)), g.act((t, e_dim))
    g.gather(ids_t, m.w("bert.embeddings.word_embeddings.weight"), e1, rows=t, channels=e_dim)
    g.gather(pos_t, m.w("bert.pos_type"), e2, rows=t, channels=e_dim)
    g.axpby(e1, e2, e, n=t * e_dim)
    en = g.act((t, e_dim))
    g.norm(e, en, groups=t, n=e_dim, elem_stride=1, group_stride=e_dim, eps=LN_EPS_BERT, by_group=False,
           gamma=m.w("bert.embeddings.LayerNorm.weight"), beta=m.w("bert.embeddings.LayerNorm.bias"))
    h = g.act((t, d_b))
    g.linear(en, m.w("bert.encoder.embedding_hidden_mapping_in.weight"),
             m.w("bert.encoder.embedding_hidden_mapping_in.bias"), h, rows=t, k=e_dim, n=d_b)
    L = "bert.layer."
    for _ in range(c.bert_layers):
        _cut(g, cuts)
        qkv, att = g.act((t, 3 * d_b)), g.act((t, d_b))
        g.linear(h, m.w("bert.qkv.weight"), m.w("bert.qkv.bias"), qkv, rows=t, k=d_b, n=3 * d_b)
        g.attention(qkv, att, rows=t, heads=c.bert_heads)
        a, h1 = g.act((t, d_b)), g.act((t, d_b))
        g.linear(att, m.w(L + "attention.dense.weight"), m.w(L + "attention.dense.bias"), a, rows=t, k=d_b, n=d_b,
                 residual=h)
        g.norm(a, h1, groups=t, n=d_b, elem_stride=1, group_stride=d_b, eps=LN_EPS_BERT, by_group=False,
               gamma=m.w(L + "attention.LayerNorm.weight"), beta=m.w(L + "attention.LayerNorm.bias"))
        ffn_dim = m.w(L + "ffn.bias").shape[0]
        f, f2 = g.act((t, ffn_dim)), g.act((t, d_b))
        g.linear(h1, m.w(L + "ffn.weight"), m.w(L + "ffn.bias"), f, rows=t, k=d_b, n=ffn_dim, gelu=True)
        g.linear(f, m.w(L + "ffn_output.weight"), m.w(L + "ffn_output.bias"), f2, rows=t, k=ffn_dim, n=d_b,
                 residual=h1)
        h = g.act((t, d_b))
        g.norm(f2, h, groups=t, n=d_b, elem_stride=1, group_stride=d_b, eps=LN_EPS_BERT, by_group=False,
               gamma=m.w(L + "full_layer_layer_norm.weight"), beta=m.w(L + "full_layer_layer_norm.bias"))

    _cut(g, cuts)
    # Prosody text encoder: x = [bert_encoder(h) | s] [T, 640]; 3 x (BiLSTM -> AdaLayerNorm, then | s again).
    width = c.hidden + c.style_dim
    x = g.act((t, width))
    g.linear(h, m.w("bert_encoder.weight"), m.w("bert_encoder.bias"), x, rows=t, k=d_b, n=c.hidden,
             y_strides=(width, 1))
    g.gather(zero_ids, s_pred, x, rows=t, channels=c.style_dim, out_strides=(width, 1), out_offset=c.hidden)
    n_blocks = len([n for n in m._weights if n.startswith("predictor.text_encoder.lstms.") and n.endswith(".wih")])
    for i in range(n_blocks):
        y = g.act((t, width))
        _bilstm(g, m, x, f"predictor.text_encoder.lstms.{2 * i}", y, steps=t, k=width, x_strides=(width, 1),
                y_strides=(width, 1))
        hs = _style_h(g, m, s_pred, f"predictor.text_encoder.lstms.{2 * i + 1}.fc", c.hidden)
        x = m._d if i == n_blocks - 1 else g.act((t, width))  # d: the back reads it
        g.norm(y, x, groups=t, n=c.hidden, elem_stride=1, group_stride=width, by_group=False, style_h=hs,
               channels=c.hidden)
        g.gather(zero_ids, s_pred, x, rows=t, channels=c.style_dim, out_strides=(width, 1), out_offset=c.hidden)
    _cut(g, cuts)
    # Durations: BiLSTM -> duration_proj -> sum of sigmoids / speed.
    lo = g.act((t, c.hidden))
    _bilstm(g, m, m._d, "predictor.lstm", lo, steps=t, k=width, x_strides=(width, 1), y_strides=(c.hidden, 1))
    proj, dur = g.act((t, c.max_dur)), g.act((t,))
    g.linear(lo, m.w("predictor.duration_proj.linear_layer.weight"),
             m.w("predictor.duration_proj.linear_layer.bias"), proj, rows=t, k=c.hidden, n=c.max_dur)
    g.duration(proj, dur, rows=t, bins=c.max_dur, speed=speed)

    _cut(g, cuts)
    # Text encoder: embedding -> 3 x (conv k5 -> LayerNorm over channels -> LeakyReLU) -> BiLSTM = t_en [T, 512].
    xc = g.act((c.hidden, t))
    g.gather(ids_t, m.w("text_encoder.embedding.weight"), xc, rows=t, channels=c.hidden, out_strides=(1, t))
    n_cnn = len([n for n in m._weights if n.startswith("text_encoder.cnn.") and n.endswith(".0.weight")])
    for i in range(n_cnn):
        w = m.w(f"text_encoder.cnn.{i}.0.weight")
        k = w.shape[2]
        yc, zc = g.act((c.hidden, t)), g.act((c.hidden, t))
        g.conv1d(xc, w, m.w(f"text_encoder.cnn.{i}.0.bias"), yc, c_in=c.hidden, c_out=c.hidden, t_in=t, k=k,
                 pad=(k - 1) // 2)
        g.norm(yc, zc, groups=t, n=c.hidden, elem_stride=t, group_stride=1, by_group=False,
               gamma=m.w(f"text_encoder.cnn.{i}.1.gamma"), beta=m.w(f"text_encoder.cnn.{i}.1.beta"), leaky=LEAKY)
        xc = zc
    _bilstm(g, m, xc, "text_encoder.lstm", m._t_en, steps=t, k=c.hidden, x_strides=(1, t), y_strides=(c.hidden, 1))
    (raw,) = m.run(g, [dur], cuts, should_stop)
    return np.maximum(np.round(raw.astype(np.float32)), 1).astype(np.int64)  # torch.round: half to even


def _adain_resblk(g: DynamicGraph, m: KokoroWeights, x: Tensor, name: str, s: Tensor, *, c_in: int, c_out: int,
                  t: int, upsample: bool = False, out: Tensor | None = None) -> Tensor:
    """AdainResBlk1d: (conv2(act(norm2(conv1(pool(act(norm1(x))))))) + shortcut(x)) / sqrt(2); [C_out, T']."""
    t2 = 2 * t if upsample else t
    n1 = g.act((c_in, t))
    g.norm(x, n1, groups=c_in, n=t, elem_stride=1, group_stride=t, by_group=True,
           style_h=_style_h(g, m, s, name + ".norm1.fc", c_in), channels=c_in, leaky=LEAKY)
    if upsample:
        pooled = g.act((c_in, t2))
        g.conv_transpose1d(n1, m.w(name + ".pool.weight"), m.w(name + ".pool.bias"), pooled, c_in=c_in, c_out=c_in,
                           t_in=t, k=3, stride=2, pad=1, output_padding=1, depthwise=True)
        n1 = pooled
    c1, n2 = g.act((c_out, t2)), g.act((c_out, t2))
    g.conv1d(n1, m.w(name + ".conv1.weight"), m.w(name + ".conv1.bias"), c1, c_in=c_in, c_out=c_out, t_in=t2, k=3,
             pad=1)
    g.norm(c1, n2, groups=c_out, n=t2, elem_stride=1, group_stride=t2, by_group=True,
           style_h=_style_h(g, m, s, name + ".norm2.fc", c_out), channels=c_out, leaky=LEAKY)
    if c_in != c_out:  # learned shortcut: conv1x1 (no bias) at the input rate, read nearest-upsampled
        sc = g.act((c_out, t))
        g.conv1d(x, m.w(name + ".conv1x1.weight"), m.zeros(c_out), sc, c_in=c_in, c_out=c_out, t_in=t, k=1)
    else:
        sc = x
    y = out if out is not None else g.act((c_out, t2))
    g.conv1d(n2, m.w(name + ".conv2.weight"), m.w(name + ".conv2.bias"), y, c_in=c_out, c_out=c_out, t_in=t2, k=3,
             pad=1, residual=sc, r_shift=1 if upsample else 0, scale=float(np.float32(1 / np.sqrt(2))))
    return y


def _snake_resblock(g: DynamicGraph, m: KokoroWeights, x: Tensor, name: str, s: Tensor, *, ch: int, t: int, k: int,
                    dilations: tuple[int, ...], cuts: list[int]) -> Tensor:
    """AdaINResBlock1: x += conv2(snake(adain2(conv1_dil(snake(adain1(x)))))) for each dilation; [C, T]. A step
    per convolution: at the generator's last rate these blocks are the longest work of a synthesis."""
    for j, d in enumerate(dilations):
        _cut(g, cuts)
        a = g.act((ch, t))
        g.norm(x, a, groups=ch, n=t, elem_stride=1, group_stride=t, by_group=True, channels=ch,
               style_h=_style_h(g, m, s, f"{name}.adain1.{j}.fc", ch), snake_alpha=m.w(f"{name}.alpha1.{j}"))
        b = g.act((ch, t))
        g.conv1d(a, m.w(f"{name}.convs1.{j}.weight"), m.w(f"{name}.convs1.{j}.bias"), b, c_in=ch, c_out=ch, t_in=t,
                 k=k, dilation=d, pad=d * (k - 1) // 2)
        _cut(g, cuts)
        a2 = g.act((ch, t))
        g.norm(b, a2, groups=ch, n=t, elem_stride=1, group_stride=t, by_group=True, channels=ch,
               style_h=_style_h(g, m, s, f"{name}.adain2.{j}.fc", ch), snake_alpha=m.w(f"{name}.alpha2.{j}"))
        y = g.act((ch, t))
        g.conv1d(a2, m.w(f"{name}.convs2.{j}.weight"), m.w(f"{name}.convs2.{j}.bias"), y, c_in=ch, c_out=ch, t_in=t,
                 k=k, pad=(k - 1) // 2, residual=x)
        x = y
    return x


def largest_back_bytes(c: KokoroConfig, frames: int) -> int:
    """The largest activation `back` makes for `frames` frames, in bytes (its shapes, mirrored): a device binds
    buffers up to a limit, so a chunk whose speech is too long for it must be split before `back` runs."""
    f0_frames = 2 * frames
    largest = max((1024 + 64 + 2) * frames, f0_frames * c.upsample)
    ch, cols = c.hidden, f0_frames
    for i, (rate, kernel) in enumerate(zip(c.upsample_rates, c.upsample_kernels)):
        last = i == len(c.upsample_rates) - 1
        ch //= 2
        cols = (cols - 1) * rate - 2 * ((kernel - rate) // 2) + kernel + (1 if last else 0)
        largest = max(largest, ch * cols)
    return 4 * largest


def back(m: KokoroWeights, ids: np.ndarray, durations: np.ndarray, style: np.ndarray, *, seed: int,
         noise: bool, taps: dict[str, np.ndarray] | None = None,
         should_stop: Callable[[], bool] | None = None) -> np.ndarray:
    """Audio (float32, 24 kHz) for the front's d and t_en aligned by durations. taps: a dict to fill with
    named intermediates (tests and debugging: the F0 curve, decoder output, source, STFT, conv_post). Runs in
    steps (the shared LSTM, each residual block of the predictor, decoder and generator), asking should_stop
    before each."""
    c = m.config
    ex = m.executor
    t = len(ids)
    frames = int(durations.sum())
    g = DynamicGraph(ex, "kokoro.back")
    cuts: list[int] = []
    kept: dict[str, Tensor] = {}

    def tap(name: str, tensor: Tensor) -> None:
        if taps is not None:
            kept[name] = ex.tensor(f"kokoro.tap.{name}", tensor.shape)
            g.axpby(tensor, tensor, kept[name], n=tensor.numel, b=0.0)
    idx = ex.tensor("kokoro.align", (frames,), "u32", data=np.repeat(np.arange(t, dtype=np.uint32), durations))
    s_pred = ex.tensor("kokoro.s_pred", (1, c.style_dim), data=style[c.style_dim:])
    s_dec = ex.tensor("kokoro.s_dec", (1, c.style_dim), data=style[: c.style_dim])
    width, hid = c.hidden + c.style_dim, c.hidden

    # Length regulation: en = d^T @ alignment [640, F]; asr = t_en^T @ alignment into cat0 [514, F] rows 0..511.
    en = g.act((width, frames))
    g.gather(idx, m._d, en, rows=frames, channels=width, out_strides=(1, frames))
    cat0 = g.act((hid + 2, frames))
    g.gather(idx, m._t_en, cat0, rows=frames, channels=hid, out_strides=(1, frames))

    # F0 and N: shared BiLSTM [512, F], then 3 AdainResBlk1d each (the second upsamples x2), 1x1 projections.
    sh = g.act((hid, frames))
    _bilstm(g, m, en, "predictor.shared", sh, steps=frames, k=width, x_strides=(1, frames), y_strides=(1, frames))
    curves = {}
    for branch in ("F0", "N"):
        _cut(g, cuts)
        x = _adain_resblk(g, m, sh, f"predictor.{branch}.0", s_pred, c_in=hid, c_out=hid, t=frames)
        _cut(g, cuts)
        x = _adain_resblk(g, m, x, f"predictor.{branch}.1", s_pred, c_in=hid, c_out=hid // 2, t=frames,
                          upsample=True)
        _cut(g, cuts)
        x = _adain_resblk(g, m, x, f"predictor.{branch}.2", s_pred, c_in=hid // 2, c_out=hid // 2, t=2 * frames)
        curve = g.act((2 * frames,))
        g.conv1d(x, m.w(f"predictor.{branch}_proj.weight"), m.w(f"predictor.{branch}_proj.bias"), curve,
                 c_in=hid // 2, c_out=1, t_in=2 * frames, k=1)
        curves[branch] = curve
        tap(branch, curve)
        # decoder.F0_conv / N_conv (k3, stride 2) straight into cat0's last two rows
        row = hid if branch == "F0" else hid + 1
        g.conv1d(curve, m.w(f"decoder.{branch}_conv.weight"), m.w(f"decoder.{branch}_conv.bias"), cat0, c_in=1,
                 c_out=1, t_in=2 * frames, k=3, stride=2, pad=1, y_offset=row * frames)

    # Decoder: encode (514 -> 1024), then 4 blocks on [x | asr_res | F0 | N] (1090 rows), the last upsampling.
    dec_in = 1024 + 64 + 2
    cats = [g.act((dec_in, frames)), g.act((dec_in, frames))]
    for cat in cats:  # the tails are the same for every block: asr_res (64 rows), F0, N
        g.conv1d(cat0, m.w("decoder.asr_res.0.weight"), m.w("decoder.asr_res.0.bias"), cat, c_in=hid, c_out=64,
                 t_in=frames, k=1, y_offset=1024 * frames)
        g.axpby(cat0, cat0, cat, n=2 * frames, b=0.0, x_offset=hid * frames, out_offset=1088 * frames)
    _cut(g, cuts)
    _adain_resblk(g, m, cat0, "decoder.encode", s_dec, c_in=hid + 2, c_out=1024, t=frames, out=cats[0])
    for i in range(3):
        _cut(g, cuts)
        _adain_resblk(g, m, cats[i % 2], f"decoder.decode.{i}", s_dec, c_in=dec_in, c_out=1024, t=frames,
                      out=cats[(i + 1) % 2])
    _cut(g, cuts)
    x = _adain_resblk(g, m, cats[1], "decoder.decode.3", s_dec, c_in=dec_in, c_out=hid, t=frames, upsample=True)
    tap("shared", sh)
    tap("encode_in", cat0)
    tap("decoder", x)

    _cut(g, cuts)
    # Generator: harmonic source from the F0 curve, its STFT (22 rows), two upsampling stages, conv_post, iSTFT.
    f0_frames = 2 * frames
    phase = g.act((f0_frames, 9))
    source = g.act((f0_frames * c.upsample,))
    samples = g.harmonic_source(curves["F0"], phase, m.w("source.lin"), source, frames=f0_frames,
                                upsample=c.upsample, seed=seed, noise=noise)
    har = g.act((22, samples // c.hop + 1))
    n_har = g.stft(source, har, samples=samples, hop=c.hop)
    tap("source", source)
    tap("har", har)
    ch, cols = hid, f0_frames
    n_k = len(c.resblock_kernels)
    for i, (rate, kernel) in enumerate(zip(c.upsample_rates, c.upsample_kernels)):
        last = i == len(c.upsample_rates) - 1
        ch_out = ch // 2
        cols_out = (cols - 1) * rate - 2 * ((kernel - rate) // 2) + kernel + (1 if last else 0)
        nw = m.w(f"decoder.generator.noise_convs.{i}.weight")
        xs = g.act((ch_out, cols_out))
        if last:
            g.conv1d(har, nw, m.w(f"decoder.generator.noise_convs.{i}.bias"), xs, c_in=22, c_out=ch_out,
                     t_in=n_har, k=1)
            nk = 11
        else:
            stride_f0 = int(np.prod(c.upsample_rates[i + 1:]))
            g.conv1d(har, nw, m.w(f"decoder.generator.noise_convs.{i}.bias"), xs, c_in=22, c_out=ch_out,
                     t_in=n_har, k=2 * stride_f0, stride=stride_f0, pad=(stride_f0 + 1) // 2)
            nk = 7
        xs = _snake_resblock(g, m, xs, f"decoder.generator.noise_res.{i}", s_dec, ch=ch_out, t=cols_out, k=nk,
                             dilations=(1, 3, 5), cuts=cuts)
        _cut(g, cuts)
        up = g.act((ch_out, cols_out))
        g.conv_transpose1d(x, m.w(f"decoder.generator.ups.{i}.weight"), m.w(f"decoder.generator.ups.{i}.bias"), up,
                           c_in=ch, c_out=ch_out, t_in=cols, k=kernel, stride=rate, pad=(kernel - rate) // 2,
                           pre_slope=0.1, residual=xs, reflect_left=last)
        outs = []
        for j, (kk, dd) in enumerate(zip(c.resblock_kernels, c.resblock_dilations)):
            outs.append(_snake_resblock(g, m, up, f"decoder.generator.resblocks.{i * n_k + j}", s_dec, ch=ch_out,
                                        t=cols_out, k=kk, dilations=dd, cuts=cuts))
        acc = outs[0]
        for j, o in enumerate(outs[1:], start=2):
            nxt = g.act((ch_out, cols_out))
            g.axpby(acc, o, nxt, n=ch_out * cols_out, div=float(n_k) if j == n_k else 1.0)
            acc = nxt
        tap(f"noise_res{i}", xs)
        tap(f"up{i}", up)
        x, ch, cols = acc, ch_out, cols_out
    _cut(g, cuts)
    post = g.act((22, cols))
    g.conv1d(x, m.w("decoder.generator.conv_post.weight"), m.w("decoder.generator.conv_post.bias"), post, c_in=ch,
             c_out=22, t_in=cols, k=7, pad=3, pre_slope=0.01)
    audio = g.act(((cols - 1) * c.hop,))
    g.istft(post, audio, frames=cols, hop=c.hop)
    tap("post", post)
    names = list(kept)
    out, *tapped = m.run(g, [audio, *[kept[n] for n in names]], cuts, should_stop)
    if taps is not None:
        taps.update(zip(names, tapped))
    return out.astype(np.float32)
