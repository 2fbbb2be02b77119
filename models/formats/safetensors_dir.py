"""A sentence-transformers model directory: safetensors weights, config.json, tokenizer.json, and the
modules.json pipeline (Transformer, Pooling, Dense, Normalize) that says how token rows become one vector.

    d = ModelDir(path)
    d.config["hidden_size"], d.pipeline.pooling, d.pipeline.normalize, d.tensor("embeddings.word_embeddings.weight")

Weights stay memory-mapped until read; sharded checkpoints (model.safetensors.index.json) work too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from tokenizers import Tokenizer

# sentence-transformers' pooling modes (1_Pooling/config.json) -> gpu.ops.encoder.POOLING_MODES
_POOLING_NAMES = {"mean": "mean", "cls": "cls", "lasttoken": "last", "max": "max",
                  "mean_sqrt_len_tokens": "mean_sqrt_len"}
_LEGACY_POOLING_KEYS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                        "pooling_mode_lasttoken": "lasttoken", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens": "weightedmean"}
_IDENTITY = ("torch.nn.modules.linear.Identity", "torch.nn.Identity")


class ModelDirError(ValueError):
    """The directory is not a model Hearth can load, or lacks a file or tensor it needs."""


@dataclass(frozen=True)
class Dense:
    """A sentence-transformers Dense module after pooling: y = W x (+ b), no activation."""

    weight: np.ndarray  # [out_features, in_features] float32
    bias: np.ndarray | None  # [out_features]


@dataclass(frozen=True)
class Pipeline:
    """What follows the transformer: pooling, dense projections, L2 normalisation."""

    pooling: str = "mean"  # a key of gpu.ops.encoder.POOLING_MODES
    dense: tuple[Dense, ...] = field(default_factory=tuple)
    normalize: bool = False
    max_seq_length: int | None = None  # sentence_bert_config.json: tokens per input (specials included)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ModelDirError(f"{path}: {error}") from error


def pooling_mode(config: dict[str, Any]) -> str:
    """The one pooling mode of a 1_Pooling/config.json (either format sentence-transformers writes)."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in _LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else modes
    if isinstance(mode, list):
        mode = mode[0] if len(mode) == 1 else mode
    if not isinstance(mode, str) or mode not in _POOLING_NAMES:
        raise ModelDirError(f"pooling {mode!r} is not supported (supported: {', '.join(_POOLING_NAMES)})")
    return _POOLING_NAMES[mode]


class ModelDir:
    """The files of one model directory, read on demand."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not (self.path / "config.json").is_file():
            raise ModelDirError(f"{self.path}: no config.json (not a model directory)")
        self.config: dict[str, Any] = _read_json(self.path / "config.json")
        self._files = self._weight_files()
        self._index: dict[str, Path] = {}
        for file in self._files:
            with safe_open(file, "np") as f:
                self._index.update({name: file for name in f.keys()})
        self.pipeline = self._read_pipeline()

    def _weight_files(self) -> list[Path]:
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            names = sorted(set(_read_json(index)["weight_map"].values()))
            return [self.path / n for n in names]
        single = self.path / "model.safetensors"
        if not single.is_file():
            raise ModelDirError(f"{self.path}: no model.safetensors (Hearth reads safetensors checkpoints)")
        return [single]

    def names(self) -> list[str]:
        return sorted(self._index)

    def has(self, name: str) -> bool:
        return name in self._index

    def stored(self, name: str) -> np.ndarray:
        """A weight in the file's dtype (bf16, which numpy lacks, widened to float32)."""
        if name not in self._index:
            raise ModelDirError(f"{self.path.name}: tensor {name} is missing")
        with safe_open(self._index[name], "np") as f:
            try:
                return f.get_tensor(name)
            except TypeError:  # numpy has no bfloat16: read it through its bits
                return _bf16_tensor(self._index[name], name)

    def tensor(self, name: str) -> np.ndarray:
        """A weight as float32 (bf16 and f16 checkpoints are widened)."""
        return np.ascontiguousarray(self.stored(name), dtype=np.float32)

    def tokenizer(self) -> Tokenizer:
        """tokenizer.json as the HF fast tokenizer uses it, without its stored truncation and padding."""
        path = self.path / "tokenizer.json"
        if not path.is_file():
            raise ModelDirError(f"{self.path}: no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    def _read_pipeline(self) -> Pipeline:
        """modules.json's modules after the Transformer; a bare transformers checkpoint gets mean pooling."""
        modules_file = self.path / "modules.json"
        bert_config = self.path / "sentence_bert_config.json"
        max_len = _read_json(bert_config).get("max_seq_length") if bert_config.is_file() else None
        if not modules_file.is_file():
            return Pipeline(max_seq_length=max_len)
        pooling, dense, normalize = None, [], False
        for module in sorted(_read_json(modules_file), key=lambda m: m.get("idx", 0)):
            kind = module["type"].rsplit(".", 1)[-1]
            where = self.path / module.get("path", "")
            if kind == "Transformer":
                continue
            if kind == "Pooling":
                pooling = pooling_mode(_read_json(where / "config.json"))
            elif kind == "Dense":
                dense.append(self._dense(where))
            elif kind == "Normalize":
                normalize = True
            else:
                raise ModelDirError(f"{self.path.name}: sentence-transformers module {kind} is not supported")
        return Pipeline(pooling or "mean", tuple(dense), normalize, max_len)

    @staticmethod
    def _dense(where: Path) -> Dense:
        config = _read_json(where / "config.json")
        activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
        if activation not in _IDENTITY:
            raise ModelDirError(f"{where.name}: Dense activation {activation} is not supported (only Identity)")
        with safe_open(where / "model.safetensors", "np") as f:
            weight = np.ascontiguousarray(f.get_tensor("linear.weight"), dtype=np.float32)
            bias = f.get_tensor("linear.bias").astype(np.float32) if "linear.bias" in f.keys() else None
        return Dense(weight, bias)


def _bf16_tensor(file: Path, name: str) -> np.ndarray:
    """A bfloat16 tensor widened to float32 (its bits are the top half of an f32)."""
    with open(file, "rb") as fh:
        header_len = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(header_len))
    info = header[name]
    start, end = info["data_offsets"]
    raw = np.memmap(file, dtype=np.uint16, mode="r", offset=8 + header_len + start, shape=((end - start) // 2,))
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])
