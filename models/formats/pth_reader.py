"""PyTorch checkpoints (`torch.save` zip files) read as numpy, without torch and without running their code.

A `.pth`/`.pt` file is a zip holding `<name>/data.pkl` (a pickle of dicts and tensor references) and
`<name>/data/<key>` (the raw bytes of each storage). Unpickling normally imports whatever the pickle
names; here a restricted unpickler allows only the handful of globals a state dict needs
(OrderedDict, the tensor and parameter rebuild functions, the typed storage classes) and refuses the
rest, so a hostile file cannot run code. Tensors come back as numpy arrays (little-endian files only).
`PthSource(path)` gives a state dict's tensors by name (models/formats/weights.py's WeightSource).
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from models.formats.weights import Matrix, host_matrix


class CheckpointError(ValueError):
    """The file is not a torch zip checkpoint we can read, or it asks for something we do not allow."""


_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
    "ByteStorage": np.uint8, "BoolStorage": np.bool_, "BFloat16Storage": "bfloat16",
}


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = _STORAGE_DTYPES[name]


def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    *_: Any) -> np.ndarray:
    if not size:
        return storage[offset:offset + 1].reshape(()).copy()
    itemsize = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * itemsize for s in stride))
    return np.ascontiguousarray(view)


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    return data


_ALLOWED = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise CheckpointError(f"checkpoint asks for {module}.{name}, which a state dict does not need; refused")

    def persistent_load(self, pid: Any) -> np.ndarray:
        # ('storage', storage type, key, location, number of elements)
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise CheckpointError(f"unexpected persistent id {pid!r}")
        storage_type, key = pid[1], pid[2]
        if not isinstance(storage_type, _StorageType):
            raise CheckpointError(f"unexpected storage type {storage_type!r}")
        raw = self.archive.read(f"{self.prefix}data/{key}")
        if storage_type.dtype == "bfloat16":
            return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        return np.frombuffer(raw, dtype=storage_type.dtype)


def load_checkpoint(path: str | Path) -> Any:
    """The object a torch zip checkpoint holds (dicts of numpy arrays in place of tensors)."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: not a torch zip checkpoint ({error}); legacy pickles are not read") from error
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if not pickles:
            raise CheckpointError(f"{path}: no data.pkl inside")
        prefix = pickles[0][: -len("data.pkl")]
        if archive.namelist() and prefix + "byteorder" in archive.namelist():
            if archive.read(prefix + "byteorder").strip() != b"little":
                raise CheckpointError(f"{path}: big-endian checkpoints are not supported")
        with archive.open(pickles[0]) as file:
            try:
                return _RestrictedUnpickler(file, archive, prefix).load()
            except CheckpointError:
                raise
            except Exception as error:
                raise CheckpointError(f"{path}: cannot unpickle ({error})") from error


class PthSource:
    """A state dict's tensors by name (a WeightSource); nested dicts ({submodule: state dict}) are named by their keys
    joined with dots. float16 matrices stay float16, everything else becomes float32."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        checkpoint = load_checkpoint(self.path)
        if not isinstance(checkpoint, dict):
            raise CheckpointError(f"{self.path}: expected a state dict, found {type(checkpoint).__name__}")
        self.tensors: dict[str, np.ndarray] = {}
        self._flatten("", checkpoint)

    def _flatten(self, prefix: str, d: dict) -> None:
        for key, value in d.items():
            if isinstance(value, dict):
                self._flatten(f"{prefix}{key}.", value)
            else:
                self.tensors[f"{prefix}{key}"] = np.asarray(value)

    def names(self) -> list[str]:
        return list(self.tensors)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def _get(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: tensor {name} is missing")
        return self.tensors[name]

    def matrix(self, name: str) -> Matrix:
        return host_matrix(self._get(name))

    def array(self, name: str) -> np.ndarray:
        return self._get(name).astype(np.float32)
