"""The WeightSources over CTranslate2 model.bin, ONNX initializers and .pth state dicts: names, dtypes, values."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType

from models.formats.ct2_file import CT2FormatError, CT2Source
from models.formats.pth_reader import CheckpointError, PthSource
from models.formats.weights import host_matrix

GOLDEN = Path(__file__).parents[1] / "golden" / "kokoro"
_CT2_TYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int32): 3, np.dtype(np.float16): 4}


def _ct2_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _write_ct2(path: Path, variables: dict[str, np.ndarray], aliases: dict[str, str]) -> None:
    """A version 6 model.bin as CTranslate2's spec serialises it."""
    out = struct.pack("<I", 6) + _ct2_string("TinySpec") + struct.pack("<II", 1, len(variables))
    for name, array in variables.items():
        out += _ct2_string(name) + struct.pack("<B", array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<BI", _CT2_TYPE_IDS[array.dtype], array.nbytes) + array.tobytes()
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases.items():
        out += _ct2_string(alias) + _ct2_string(target)
    path.write_bytes(out)


def test_ct2_source_keeps_f16_matrices_and_widens_the_rest(tmp_path: Path) -> None:
    w = np.arange(12, dtype=np.float16).reshape(3, 4)
    b = np.array([0.5, -1.0, 2.0], np.float32)
    q = np.array([[1, -2], [3, -4]], np.int8)
    _write_ct2(tmp_path / "model.bin", {"enc/w": w, "enc/b": b, "enc/q": q, "heads": np.array(6, np.int32)},
               {"dec/w": "enc/w"})
    source = CT2Source(tmp_path / "model.bin")
    assert source.names() == ["enc/w", "enc/b", "enc/q", "heads", "dec/w"]
    assert source.has("dec/w") and not source.has("enc/x")
    m = source.matrix("dec/w")
    assert (m.qtype, m.k, m.n, m.data.dtype) == (GGMLQuantizationType.F16, 4, 3, np.float16)
    np.testing.assert_array_equal(m.data, w)
    mq = source.matrix("enc/q")
    assert (mq.qtype, mq.data.dtype) == (GGMLQuantizationType.F32, np.float32)
    np.testing.assert_array_equal(mq.data, q)
    assert source.array("enc/b").dtype == np.float32
    np.testing.assert_array_equal(source.array("enc/w"), w.astype(np.float32))
    assert int(source.array("heads")) == 6
    with pytest.raises(CT2FormatError, match="enc/x"):
        source.array("enc/x")


def test_ct2_source_refuses_truncated_files(tmp_path: Path) -> None:
    _write_ct2(tmp_path / "model.bin", {"w": np.ones((2, 2), np.float32)}, {})
    (tmp_path / "cut.bin").write_bytes((tmp_path / "model.bin").read_bytes()[:30])
    with pytest.raises(CT2FormatError, match="truncated"):
        CT2Source(tmp_path / "cut.bin")


def test_onnx_source_reads_initializers_by_name(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from models.formats.onnx_reader import ONNXFormatError, ONNXSource

    w = np.arange(6, dtype=np.float16).reshape(2, 3)
    b = np.array([1.0, 2.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y0"], name="/lin/MatMul"),
         helper.make_node("Add", ["y0", "B"], ["y"], name="/lin/Add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    source = ONNXSource(path)
    assert source.names() == ["W", "B"] and source.has("B") and not source.has("x")
    m = source.matrix("W")
    assert (m.qtype, m.k, m.n) == (GGMLQuantizationType.F16, 3, 2)
    np.testing.assert_array_equal(m.data, w)
    assert source.array("W").dtype == np.float32 and source.array("B").dtype == np.float32
    np.testing.assert_array_equal(source.array("B"), b)
    with pytest.raises(ONNXFormatError, match="missing"):
        source.array("C")


def test_pth_source_names_nested_state_dicts_with_dots() -> None:
    source = PthSource(GOLDEN / "tiny_state.pth")
    assert source.has("bert_encoder.w") and source.has("decoder.module.bias")  # DataParallel prefix kept
    np.testing.assert_array_equal(source.array("bert_encoder.w"), np.arange(6).reshape(2, 3))  # a Parameter
    assert source.array("bert_encoder.h").dtype == np.float32
    np.testing.assert_array_equal(source.array("bert_encoder.h"), [1.5, -2.0])  # fp16 widened
    np.testing.assert_array_equal(source.array("bert_encoder.b"), [0.25, 3.0])  # bf16 widened
    m = source.matrix("bert_encoder.t")  # a transposed view, read contiguous
    assert (m.k, m.n) == (3, 4)
    np.testing.assert_array_equal(m.data, np.arange(12).reshape(3, 4).T)
    with pytest.raises(CheckpointError, match="missing"):
        source.array("decoder.nothing")


def test_host_matrix_flattens_rows() -> None:
    m = host_matrix(np.ones((2, 3, 4), np.float64))
    assert (m.qtype, m.k, m.n, m.data.dtype) == (GGMLQuantizationType.F32, 4, 6, np.float32)
