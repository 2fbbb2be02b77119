"""CTranslate2 model files (model.bin) read as numpy, and a WeightSource over their variables.

The layout (python/ctranslate2/specs/model_spec.py `_serialize`, binary version 6; versions 1 to 6 are read): u32
version, a string (u16 length counting its NUL, the bytes, NUL) naming the spec, u32 spec revision, u32 variable
count, then per variable: name string, u8 rank, u32 dims[rank], u8 dtype (float32, int8, int16, int32, float16,
bfloat16 from version 4 on; earlier files have a u8 item size and are float32), u32 byte count, the bytes; finally
u32 alias count and (alias, target) string pairs.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from models.formats.weights import Matrix, host_matrix

_CT2_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # index = type id; None: bfloat16


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model.bin we can read."""


def read_ct2_model_bin(path: Path) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 model.bin (aliases resolved to their target's array)."""
    data = memoryview(path.read_bytes())
    offset = 0

    def take(fmt: str) -> int:
        nonlocal offset
        (value,) = struct.unpack_from("<" + fmt, data, offset)
        offset += struct.calcsize("<" + fmt)
        return value

    def string() -> str:
        nonlocal offset
        n = take("H")
        text = bytes(data[offset:offset + n - 1]).decode("utf-8")
        offset += n
        return text

    try:
        version = take("I")
        if not 1 <= version <= 6:
            raise CT2FormatError(f"{path}: CTranslate2 binary version {version} is not supported (1 to 6)")
        if version >= 2:
            string()  # spec name
            take("I")  # spec revision
        variables: dict[str, np.ndarray] = {}
        for _ in range(take("I")):
            name = string()
            shape = tuple(take("I") for _ in range(take("B")))
            if version >= 4:
                type_id = take("B")
                if type_id >= len(_CT2_DTYPES):
                    raise CT2FormatError(f"{path}: {name} has an unknown dtype id {type_id}")
                dtype = _CT2_DTYPES[type_id]
                nbytes = take("I")
            else:
                item_size = take("B")
                nbytes = take("I")
                dtype = {4: np.float32, 2: np.int16, 1: np.int8}[item_size]
            raw = data[offset:offset + nbytes]
            offset += nbytes
            if dtype is None:  # bfloat16: widen to float32
                array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                array = np.frombuffer(raw, dtype)
            variables[name] = array.reshape(shape)
        if offset < len(data):
            for _ in range(take("I")):
                alias, target = string(), string()
                if target in variables:
                    variables[alias] = variables[target]
    except struct.error as error:
        raise CT2FormatError(f"{path}: truncated CTranslate2 model file ({error})") from error
    return variables


class CT2Source:
    """A CTranslate2 model.bin's variables by name (`decoder/layer_0/ffn/linear_0/weight`): float16 matrices stay
    float16, everything else becomes float32."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.variables = read_ct2_model_bin(self.path)

    def names(self) -> list[str]:
        return list(self.variables)

    def has(self, name: str) -> bool:
        return name in self.variables

    def _get(self, name: str) -> np.ndarray:
        if name not in self.variables:
            raise CT2FormatError(f"{self.path}: variable {name} is missing")
        return self.variables[name]

    def matrix(self, name: str) -> Matrix:
        return host_matrix(self._get(name))

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self._get(name), np.float32)
