"""GGUFFile's one-pass metadata reader reads every field as gguf-py's stock reader does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from models.formats.gguf_file import GGUFFile, MetadataReader


def write_gguf(path: Path) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_string("test.string", "héllo")
    w.add_uint32("test.u32", 7)
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.bool", True)
    w.add_array("test.strings", ["", "a", "piece ▁with spaces", "日本", "<|tool_call>"])
    w.add_array("test.ints", [3, -1, 2**31 - 1])
    w.add_array("test.floats", [-1000.0, 0.25, 3.5])
    w.add_array("test.bools", [True, False, True])
    w.add_key_value("test.nested", [[1, 2], [3]], GGUFValueType.ARRAY, sub_type=GGUFValueType.ARRAY)
    w.add_tensor("weight", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_fields_read_as_the_stock_reader_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "fields.gguf"
    write_gguf(path)
    stock, fast = GGUFReader(path), MetadataReader(path)
    assert list(fast.fields) == list(stock.fields)
    for name, want in stock.fields.items():
        got = fast.fields[name]
        assert got.types == want.types, name
        assert got.offset == want.offset, name
        assert got.contents() == want.contents(), name
        assert sum(p.nbytes for p in got.parts) == sum(p.nbytes for p in want.parts), name
    numbers = fast.fields["test.floats"]
    assert np.concatenate([numbers.parts[i] for i in numbers.data]).tolist() == [-1000.0, 0.25, 3.5]
    assert [t.name for t in fast.tensors] == ["weight"]
    assert np.asarray(fast.tensors[0].data).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_gguf_file_reads_strings_and_numbers(tmp_path: Path) -> None:
    path = tmp_path / "fields.gguf"
    write_gguf(path)
    f = GGUFFile(path)
    assert f.arch == "llama"
    assert f.value("test.strings") == ["", "a", "piece ▁with spaces", "日本", "<|tool_call>"]
    assert f.value("test.ints") == [3, -1, 2**31 - 1]
    with pytest.raises(ValueError, match="test.missing"):
        f.value("test.missing")
