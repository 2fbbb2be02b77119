"""A GGUF file opened memory-mapped with gguf-py, with typed metadata access.

Keys and tensor names come from gguf-py's constants (`gguf.Keys`, `gguf.TENSOR_NAMES`);
this wrapper only fills in the architecture and validates what it reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, Keys, ReaderTensor


class GGUFFormatError(ValueError):
    """The file is not a GGUF we can use, or lacks a key or tensor the model needs."""


class MetadataReader(GGUFReader):
    """gguf-py's reader with arrays of numbers and strings read in one pass.

    The stock reader builds numpy views for every element, through its generic per-field path: for a
    vocabulary of 262k tokens (pieces, scores, types) that is most of a model's load time. Fields come out
    as the stock reader's, except that an array of numbers is one part holding every value (`contents()`
    and `field.parts[i] for i in field.data` read the same values). Byte-swapped files and nested arrays
    take the stock path."""

    def _get_field_parts(
        self, orig_offs: int, raw_type: int,
    ) -> tuple[int, list[np.ndarray], list[int], list[GGUFValueType]]:
        if raw_type != GGUFValueType.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_item_type = self._get(orig_offs, np.uint32)
        item_type = GGUFValueType(int(raw_item_type[0]))
        number_type = self.gguf_scalar_to_np.get(item_type)
        if number_type is None and item_type != GGUFValueType.STRING:
            return super()._get_field_parts(orig_offs, raw_type)
        length = self._get(orig_offs + 4, np.uint64)
        count = int(length[0])
        offs = orig_offs + 12
        parts: list[np.ndarray] = [raw_item_type, length]
        types = [GGUFValueType.ARRAY, item_type] if count else [GGUFValueType.ARRAY]
        if number_type is not None:
            values = self._get(offs, number_type, count)
            parts.append(values)
            return 12 + int(values.nbytes), parts, [2] if count else [], types
        data = self.data.view(np.ndarray)  # plain views: slicing the memmap subclass costs more than the read
        memory = memoryview(data)
        indexes = []
        for _ in range(count):
            size = int.from_bytes(memory[offs:offs + 8], "little")
            parts.append(data[offs:offs + 8].view(np.uint64))
            parts.append(data[offs + 8:offs + 8 + size])
            indexes.append(len(parts) - 1)
            offs += 8 + size
        return offs - orig_offs, parts, indexes, types


class GGUFFile:
    """Metadata and tensors of one GGUF file; tensor data stays memory-mapped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.reader = MetadataReader(self.path, "r")
        except (OSError, ValueError) as error:
            raise GGUFFormatError(f"{self.path}: not a readable GGUF file ({error})") from error
        self.arch = ""
        self.arch = str(self.value(Keys.General.ARCHITECTURE))
        self.tensors: dict[str, ReaderTensor] = {t.name: t for t in self.reader.tensors}

    def has(self, key: str) -> bool:
        return key.format(arch=self.arch) in self.reader.fields

    def value(self, key: str, default: Any = ...) -> Any:
        """The value of a metadata key; `{arch}` in the key is filled in."""
        name = key.format(arch=self.arch)
        field = self.reader.fields.get(name)
        if field is None:
            if default is ...:
                raise GGUFFormatError(f"{self.path.name}: metadata key {name} is missing")
            return default
        return field.contents()

    def tensor(self, name: str) -> ReaderTensor:
        if name not in self.tensors:
            raise GGUFFormatError(f"{self.path.name}: tensor {name} is missing")
        return self.tensors[name]

    def raw(self, name: str) -> tuple[GGMLQuantizationType, tuple[int, ...], np.ndarray]:
        """(type, GGUF shape ne[0], ne[1], ..., bytes as a memory-mapped uint8 array)."""
        t = self.tensor(name)
        data = np.asarray(t.data)
        return GGMLQuantizationType(t.tensor_type), tuple(int(s) for s in t.shape), data.reshape(-1).view(np.uint8)

    def f32(self, name: str) -> np.ndarray:
        """A small F32/F16 tensor (norm weights) as float32."""
        qtype, _, raw = self.raw(name)
        if qtype == GGMLQuantizationType.F32:
            return raw.view(np.float32).copy()
        if qtype == GGMLQuantizationType.F16:
            return raw.view(np.float16).astype(np.float32)
        raise GGUFFormatError(f"{self.path.name}: {name} is {qtype.name}, expected F32 or F16")

    @property
    def tensor_bytes(self) -> int:
        return sum(int(t.n_bytes) for t in self.reader.tensors)
