"""Weights out of an ONNX graph, dequantised: the parameter each initializer is, found through the graph.

An exported network names most initializers by their PyTorch path, but a quantised export (onnxruntime's
dynamic quantisation) stores int8/uint8 tensors with a scale and zero point beside them, and some
parameters only by an anonymous name (`onnx::MatMul_6547`, `onnx::LSTM_6930`) or by the node output that
computed them (`/encoder/F0.0/Mul_output_0`, a weight-normed conv weight folded at export). What each one
is shows in the node that consumes it: its op (MatMulInteger, ConvInteger, DynamicQuantizeLSTM, Gather +
DequantizeLinear, Conv, ConvTranspose, MatMul) and its name, whose scope is the module path
(`/encoder/F0.0/conv1/Conv_quant` -> scope `/encoder/F0.0/conv1`).

`ONNXSource(path)` gives the initializers by name (models/formats/weights.py's WeightSource);
`ONNXGraph(path).parameters()` walks the graph once and yields `Parameter(scope, role, array)` in float32 with the
layout PyTorch uses: Linear weights [out, in], conv weights [out, in/groups, k], LSTM weights per direction
in PyTorch's gate order (i, f, g, o). Mapping scopes to a model's own names is the caller's business.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.formats.weights import Matrix, host_matrix


class ONNXFormatError(ValueError):
    """The file is not an ONNX model we can read, or a quantised pattern is not one we know."""


@dataclass(frozen=True)
class Parameter:
    """One parameter found through the graph: the module scope of its consumer, its role there
    ("weight", "weight_ih_l0", "bias_hh_l0_reverse", ...) and its value as float32."""

    scope: str
    role: str
    array: np.ndarray


# ONNX LSTM gate blocks are (i, o, f, c); PyTorch's are (i, f, g=c, o).
_ONNX_TO_TORCH_GATES = (0, 2, 3, 1)


class ONNXGraph:
    """An ONNX model's initializers (as numpy) and who consumes each value."""

    def __init__(self, path: str | Path) -> None:
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError as error:  # pragma: no cover - onnx is a project dependency
            raise ONNXFormatError("reading ONNX needs the `onnx` package") from error
        self.path = Path(path)
        try:
            model = onnx.load(str(self.path))
        except Exception as error:  # onnx raises DecodeError and friends for a damaged file
            raise ONNXFormatError(f"{self.path}: not a readable ONNX model ({error})") from error
        graph = model.graph
        self._to_array = numpy_helper.to_array
        self._initializers = {i.name: i for i in graph.initializer}
        self.nodes = list(graph.node)
        self.consumers: dict[str, list] = {}
        for node in self.nodes:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def has(self, name: str) -> bool:
        return name in self._initializers

    def names(self) -> list[str]:
        return list(self._initializers)

    def array(self, name: str) -> np.ndarray:
        """An initializer as a numpy array (its stored dtype)."""
        if name not in self._initializers:
            raise ONNXFormatError(f"{self.path.name}: initializer {name!r} is missing")
        return self._to_array(self._initializers[name])

    def _dequant(self, q_name: str, scale_name: str, zero_name: str, axis: int | None = None) -> np.ndarray:
        q = self.array(q_name).astype(np.float32)
        scale = self.array(scale_name).astype(np.float32)
        zero = self.array(zero_name).astype(np.float32) if zero_name else np.zeros_like(scale)
        if axis is not None and scale.ndim == 1 and scale.size > 1:  # per-channel along `axis`
            shape = [1] * q.ndim
            shape[axis] = scale.size
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (q - zero) * scale

    def _scale_name(self, q_name: str) -> str:
        if not q_name.endswith("_quantized"):
            raise ONNXFormatError(f"{self.path.name}: quantised weight {q_name!r} has no _quantized suffix")
        return q_name[: -len("_quantized")] + "_scale"

    def parameters(self) -> Iterator[Parameter]:
        """Every weight consumed by a matmul, conv, LSTM or embedding gather, dequantised."""
        for node in self.nodes:
            scope = node.name.rsplit("/", 1)[0]
            op, inputs = node.op_type, list(node.input)
            if op == "MatMulInteger" and self.has(inputs[1]):
                # weight [in, out] with a per-output-column scale and zero point
                w = self._dequant(inputs[1], self._scale_name(inputs[1]), inputs[3], axis=1)
                yield Parameter(scope, "weight", np.ascontiguousarray(w.T))
            elif op == "ConvInteger" and self.has(inputs[1]):
                zero = inputs[3] if len(inputs) > 3 else ""
                yield Parameter(scope, "weight", self._dequant(inputs[1], self._scale_name(inputs[1]), zero, axis=0))
            elif op in ("Conv", "ConvTranspose") and self.has(inputs[1]):
                yield Parameter(scope, "weight", self.array(inputs[1]).astype(np.float32))
            elif op == "MatMul" and len(inputs) > 1 and self.has(inputs[1]):
                yield Parameter(scope, "weight", np.ascontiguousarray(self.array(inputs[1]).astype(np.float32).T))
            elif op == "Gather" and self.has(inputs[0]) and inputs[0].endswith("_quantized"):
                deq = [n for n in self.consumers.get(node.output[0], []) if n.op_type == "DequantizeLinear"]
                if not deq:
                    raise ONNXFormatError(f"{node.name}: quantised gather without a DequantizeLinear")
                d_in = list(deq[0].input)
                zero = d_in[2] if len(d_in) > 2 else ""
                yield Parameter(scope, "weight", self._dequant(inputs[0], d_in[1], zero, axis=None))
            elif op == "DynamicQuantizeLSTM":
                yield from self._lstm(scope, node)
            elif op == "LSTM":
                yield from self._lstm_float(scope, inputs)

    def _lstm(self, scope: str, node) -> Iterator[Parameter]:
        # inputs: X, W, R, B, seq_lens, h0, c0, P, W_scale, W_zero_point, R_scale, R_zero_point
        inputs = list(node.input)
        w = self._dequant(inputs[1], inputs[8], inputs[9], axis=0)  # [dirs, in, 4H], scale per direction
        r = self._dequant(inputs[2], inputs[10], inputs[11], axis=0)  # [dirs, H, 4H]
        b = self.array(inputs[3]).astype(np.float32) if inputs[3] else None
        yield from self._lstm_split(scope, np.swapaxes(w, 1, 2), np.swapaxes(r, 1, 2), b)

    def _lstm_float(self, scope: str, inputs: list[str]) -> Iterator[Parameter]:
        w = self.array(inputs[1]).astype(np.float32)  # [dirs, 4H, in]
        r = self.array(inputs[2]).astype(np.float32)
        b = self.array(inputs[3]).astype(np.float32) if len(inputs) > 3 and inputs[3] else None
        yield from self._lstm_split(scope, w, r, b)

    @staticmethod
    def _lstm_split(scope: str, w: np.ndarray, r: np.ndarray, b: np.ndarray | None) -> Iterator[Parameter]:
        """w [dirs, 4H, in], r [dirs, 4H, H], b [dirs, 8H] in ONNX gate order -> PyTorch names."""
        hidden = r.shape[2]

        def torch_order(x: np.ndarray) -> np.ndarray:
            blocks = np.split(x, 4, axis=0)
            return np.ascontiguousarray(np.concatenate([blocks[i] for i in _ONNX_TO_TORCH_GATES], axis=0))

        for d in range(w.shape[0]):
            suffix = "_reverse" if d == 1 else ""
            yield Parameter(scope, f"weight_ih_l0{suffix}", torch_order(w[d]))
            yield Parameter(scope, f"weight_hh_l0{suffix}", torch_order(r[d]))
            bias = b[d] if b is not None else np.zeros(8 * hidden, np.float32)
            yield Parameter(scope, f"bias_ih_l0{suffix}", torch_order(bias[: 4 * hidden]))
            yield Parameter(scope, f"bias_hh_l0{suffix}", torch_order(bias[4 * hidden:]))


class ONNXSource:
    """An ONNX model's initializers by name (a WeightSource): float16 matrices stay float16, everything else
    becomes float32. Parameters known only through the node that consumes them come from `graph.parameters()`."""

    def __init__(self, path: str | Path) -> None:
        self.graph = ONNXGraph(path)

    def names(self) -> list[str]:
        return self.graph.names()

    def has(self, name: str) -> bool:
        return self.graph.has(name)

    def matrix(self, name: str) -> Matrix:
        return host_matrix(self.graph.array(name))

    def array(self, name: str) -> np.ndarray:
        return self.graph.array(name).astype(np.float32)
