"""Kokoro-82M's weights on the executor: the config read from our GGUF, the weights (read through GGUFSource, put on
the GPU by the Uploader) in the layouts the network's ops read (models/kokoro/net.py), the vocabulary and the
voicepacks. The network and the model both build on this.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu.device import Device, default_device
from gpu.ops.dynamic import DynamicGraph
from gpu.program import Executor
from gpu.tensor import Tensor
from models.formats.gguf_file import GGUFFile
from models.formats.weights import GGUFSource, Uploader
from models.kokoro.convert import ARCH

H = 256  # LSTM hidden units per direction (hidden_dim / 2)


@dataclass(frozen=True)
class KokoroConfig:
    """The fixed shapes this implementation supports (Kokoro-82M v1.0), read from the GGUF's config."""

    n_token: int
    hidden: int
    style_dim: int
    max_dur: int
    bert_hidden: int
    bert_heads: int
    bert_layers: int
    upsample_rates: tuple[int, ...]
    upsample_kernels: tuple[int, ...]
    resblock_kernels: tuple[int, ...]
    resblock_dilations: tuple[tuple[int, ...], ...]
    n_fft: int
    hop: int

    @classmethod
    def from_json(cls, raw: dict) -> KokoroConfig:
        p, i = raw["plbert"], raw["istftnet"]
        config = cls(raw["n_token"], raw["hidden_dim"], raw["style_dim"], raw["max_dur"], p["hidden_size"],
                     p["num_attention_heads"], p["num_hidden_layers"], tuple(i["upsample_rates"]),
                     tuple(i["upsample_kernel_sizes"]), tuple(i["resblock_kernel_sizes"]),
                     tuple(tuple(d) for d in i["resblock_dilation_sizes"]), i["gen_istft_n_fft"],
                     i["gen_istft_hop_size"])
        if config.hidden != 2 * H or config.n_fft != 20 or config.hop != 5 or p["hidden_size"] // p[
                "num_attention_heads"] != 64:
            raise ValueError(f"unsupported Kokoro shapes: {raw}")
        return config

    @property
    def upsample(self) -> int:
        return math.prod(self.upsample_rates) * self.hop  # samples per F0 frame


def _f32(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)


class KokoroWeights:
    """Kokoro-82M's weights on one device in the layouts models/kokoro/net.py reads, its config, vocabulary and
    voicepacks, and the persistent tensors its two programs share."""

    max_phonemes = 510

    def __init__(self, path: str | Path, *, device: Device | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        gguf = GGUFFile(path)
        if gguf.arch != ARCH:
            raise ValueError(f"{path}: architecture {gguf.arch!r}, expected {ARCH!r}")
        self.name = str(gguf.value("general.name", Path(path).stem))
        self.config = KokoroConfig.from_json(json.loads(gguf.value(f"{ARCH}.config")))
        self.vocab: dict[str, int] = json.loads(gguf.value(f"{ARCH}.vocab"))
        source = GGUFSource(gguf)
        arrays = {n[2:]: source.array(n) for n in gguf.tensors if n.startswith("k.")}
        self.voices = {n[len("voice."):]: _f32(a) for n, a in arrays.items() if n.startswith("voice.")}
        for name, array in arrays.items():  # InstanceNorm affine: identity in Kokoro v1.0 (the ONNX drops it)
            if name.endswith(".norm.weight") and not np.allclose(array, 1.0) or \
                    name.endswith(".norm.bias") and not np.allclose(array, 0.0):
                raise ValueError(f"{path}: {name} is not the identity; instance-norm affine is not implemented")
        self.device = device or default_device()
        self.executor = Executor(self.device)
        self._weights: dict[str, Tensor] = {}
        prepared = self._prepare(arrays)
        up = Uploader(self.executor, sum(a.nbytes for a in prepared.values()), progress)
        for name, array in prepared.items():
            self._weights[name] = up.tensor(f"k.{name}", array)
        # Front outputs the back reads (persistent, sized for the longest input).
        t_max = self.max_phonemes + 2
        self._d = self.executor.tensor("kokoro.d", (t_max, self.config.hidden + self.config.style_dim))
        self._t_en = self.executor.tensor("kokoro.t_en", (t_max, self.config.hidden))
        self._zero = {}

    # -- weights ---------------------------------------------------------------------------------
    def _prepare(self, a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Our layouts: fused q|k|v, position + token-type embeddings summed, LSTMs stacked per direction,
        Snake alphas as vectors, the source's linear as 10 values; the rest as stored."""
        out: dict[str, np.ndarray] = {}
        for name, array in a.items():
            if name.startswith("voice.") or ".norm.weight" in name or ".norm.bias" in name:
                continue
            if re_alpha(name):
                array = array.reshape(-1)
            elif name.startswith("decoder.generator.ups.") and name.endswith(".weight"):
                array = array.transpose(0, 2, 1)  # [C_in, K, C_out] for conv_transpose1d
            elif _is_linear(name, array):
                array = array.T  # linear_strided reads W^T [K, N]
            out[name] = _f32(array)
        L = "bert.layer.attention."
        out["bert.qkv.weight"] = _f32(np.concatenate([a[L + n + ".weight"] for n in ("query", "key", "value")]).T)
        out["bert.qkv.bias"] = _f32(np.concatenate([a[L + n + ".bias"] for n in ("query", "key", "value")]))
        out["bert.pos_type"] = _f32(a["bert.embeddings.position_embeddings.weight"]
                                    + a["bert.embeddings.token_type_embeddings.weight"][0])
        lstms = sorted({n.rsplit(".", 1)[0] for n in a if n.endswith(".weight_ih_l0")})
        for m in lstms:
            out[m + ".wih"] = _f32(np.concatenate([a[m + ".weight_ih_l0"], a[m + ".weight_ih_l0_reverse"]]).T)
            out[m + ".b"] = _f32(np.concatenate([a[m + ".bias_ih_l0"] + a[m + ".bias_hh_l0"],
                                                 a[m + ".bias_ih_l0_reverse"] + a[m + ".bias_hh_l0_reverse"]]))
            out[m + ".whh"] = _f32(np.stack([a[m + ".weight_hh_l0"], a[m + ".weight_hh_l0_reverse"]]))
        src = "decoder.generator.m_source.l_linear."
        out["source.lin"] = _f32(np.concatenate([a[src + "weight"].reshape(-1), a[src + "bias"].reshape(-1)]))
        return out

    def w(self, name: str) -> Tensor:
        return self._weights[name]

    def zeros(self, n: int) -> Tensor:
        """A zero bias of n values (convs without a bias)."""
        if n not in self._zero:
            self._zero[n] = self.executor.tensor(f"kokoro.zero{n}", (n,))
        return self._zero[n]

    def run(self, graph: DynamicGraph, read: list[Tensor], cuts: Sequence[int] = (),
            should_stop: Callable[[], bool] | None = None) -> list[np.ndarray]:
        """Build graph's program, run it once and read back the tensors in read.

        cuts: dispatch indices where the program is split into steps. Before each step should_stop is asked, and
        concurrent.futures.CancelledError raised when it says so. A step is submitted while holding the adapter's
        turn (gpu/turns.py) and, when the device pauses between steps, waited for before the turn goes, so
        models on the same GPU get theirs in between. The steps share the program's buffers, so they compute
        exactly what one submission would."""
        program = graph.build()
        n = len(program.dispatches)
        bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
        out: list[np.ndarray] = []
        for start, stop in zip(bounds, bounds[1:]):
            if should_stop is not None and should_stop():
                raise concurrent.futures.CancelledError("synthesis stopped")
            last = stop == n
            with self.device.turns.turn():
                submission = self.executor.submission()
                compute_pass = submission.encoder.begin_compute_pass()
                program.encode(compute_pass, start, stop)
                compute_pass.end()
                if last or self.device.pauses_between_steps():
                    # An intermediate step reads a few bytes back only to wait until it has run: the turn covers it.
                    for tensor in read if last else [graph.dummy]:
                        submission.read(tensor)
                    out = submission.submit().wait()
                else:  # runs while the next step is recorded
                    submission.submit()
        return out


def re_alpha(name: str) -> bool:
    """A Snake activation's alpha (stored [1, C, 1], kept as a vector)."""
    return ".alpha1." in name or ".alpha2." in name


def _is_linear(name: str, array: np.ndarray) -> bool:
    """A Linear weight (applied by linear_strided, stored transposed), not an embedding table or the source's."""
    return (array.ndim == 2 and name.endswith(".weight") and not name.endswith("_embeddings.weight")
            and name != "text_encoder.embedding.weight" and "l_linear" not in name)
