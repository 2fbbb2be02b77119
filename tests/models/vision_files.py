"""Vision test files made on the fly: a projector's tensors laid out as Ollama's gemma3 model blobs keep them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import TENSOR_NAMES, GGUFReader, GGUFWriter

from models.vision import ollama_gemma3


def ollama_combined(tmp_path: Path, projector: Path, tokens_per_image: int = 16) -> Path:
    """A GGUF laid out as Ollama's gemma3 model blobs keep the vision tower (models/vision/ollama_gemma3.py): the
    projector file's tensors under Ollama's names and its config under gemma3.* keys (no text model: the encoder
    reads only these)."""
    reader = GGUFReader(projector)
    meta = {k: reader.fields[k].contents() for k in reader.fields if k.startswith("clip.")}
    rename = {}
    for kind, ollama in ollama_gemma3.NAMES.items():
        for i in range(meta["clip.vision.block_count"]) if "{bid}" in ollama else [None]:
            rename[TENSOR_NAMES[kind].format(bid=i)] = ollama.format(bid=i)
    path = tmp_path / "combined.gguf"
    writer = GGUFWriter(path, "gemma3")
    writer.add_uint32("gemma3.embedding_length", meta["clip.vision.projection_dim"])
    for key in ("block_count", "embedding_length", "feed_forward_length", "image_size", "patch_size"):
        writer.add_uint32(f"gemma3.vision.{key}", meta[f"clip.vision.{key}"])
    writer.add_uint32("gemma3.vision.attention.head_count", meta["clip.vision.attention.head_count"])
    writer.add_float32("gemma3.vision.attention.layer_norm_epsilon", meta["clip.vision.attention.layer_norm_epsilon"])
    writer.add_uint32("gemma3.mm.tokens_per_image", tokens_per_image)
    for t in reader.tensors:
        base, _, suffix = t.name.rpartition(".")
        writer.add_tensor(f"{rename[base]}.{suffix}", np.asarray(t.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path



def requantized(path: Path, projector: Path, choose: dict[str, str]) -> Path:
    """A copy of a projector GGUF with some matrices stored in another type, quantised by gguf-py as llama.cpp's
    converter does. choose: tensor-name substring -> "q8_0" or "f16" for 2-D weights (the first that matches; other
    tensors kept)."""
    from gguf import GGMLQuantizationType, quants

    reader = GGUFReader(projector)
    writer = GGUFWriter(path, "clip")
    for key, field in reader.fields.items():
        if key.startswith("clip."):
            value = field.contents()
            if isinstance(value, bool):
                writer.add_bool(key, value)
            elif isinstance(value, str):
                writer.add_string(key, value)
            elif isinstance(value, list):
                writer.add_array(key, value)
            elif isinstance(value, float):
                writer.add_float32(key, value)
            else:
                writer.add_uint32(key, value)
    for t in reader.tensors:
        data = np.asarray(t.data).astype(np.float32)
        matrix = t.name.endswith(".weight") and data.ndim == 2
        kind = next((v for k, v in choose.items() if k in t.name), None) if matrix else None
        if kind == "q8_0":
            q = quants.quantize(data, GGMLQuantizationType.Q8_0)
            writer.add_tensor(t.name, q, raw_dtype=GGMLQuantizationType.Q8_0)
        elif kind == "f16":
            writer.add_tensor(t.name, data.astype(np.float16))
        else:
            writer.add_tensor(t.name, np.asarray(t.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
