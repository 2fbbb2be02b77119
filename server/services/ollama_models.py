"""What Hearth knows of a model file for Ollama's /api/tags, /api/show and /api/ps: sizes, digests, details and
metadata read from its GGUF, cached per file version."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.settings import SHIPPED_MODEL
from models import ollama as store
from models.registry import ModelEntry, shipped_model_path
from server.schemas.ollama import ModelDetails


@dataclass(frozen=True)
class ModelFacts:
    """A model file's facts for /api/tags, /api/show and /api/ps (empty where the file cannot be read)."""

    path: Path | None = None
    size: int = 0
    modified: float = 0.0
    digest: str = ""
    details: ModelDetails = field(default_factory=ModelDetails)
    model_info: dict[str, Any] = field(default_factory=dict)
    template: str | None = None


def human_number(count: int) -> str:
    """A parameter count as Ollama prints it (format.HumanNumber): 268.10M, 8B, 7.6B."""
    for scale, unit, places in ((1e9, "B", 1), (1e6, "M", 2)):
        if count >= scale:
            number = count / scale
            return f"{number:.0f}{unit}" if number == int(number) else f"{number:.{places}f}{unit}"
    return f"{count / 1e3:.0f}K" if count >= 1000 else str(count)


@functools.lru_cache(maxsize=256)
def _gguf_facts(path: Path, mtime: float) -> tuple[ModelDetails, dict[str, Any], str | None]:
    """Details, scalar metadata (arrays left empty, as Ollama's non-verbose show) and the chat template of a
    GGUF, read once per file version (mtime); a file that is not a readable GGUF gives its architecture at most.
    Callers copy what they change."""
    from gguf import GGUFValueType, LlamaFileType

    from models.formats.gguf_file import MetadataReader

    try:
        reader = MetadataReader(str(path), "r")
    except Exception:  # noqa: BLE001 - any damage to a model file leaves /api/tags answering, with less detail
        arch = store.gguf_architecture(path) or ""
        return ModelDetails(family=arch, families=[arch] if arch else None), \
            ({"general.architecture": arch} if arch else {}), None
    info: dict[str, Any] = {}
    template = None
    for key, item in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if key == "tokenizer.chat_template":
            template = str(item.contents())
        elif item.types and item.types[0] == GGUFValueType.ARRAY:
            info[key] = []
        else:
            info[key] = item.contents()
    parameters = sum(int(t.n_elements) for t in reader.tensors)
    info["general.parameter_count"] = parameters
    arch = str(info.get("general.architecture", ""))
    try:
        quantization = LlamaFileType(int(info["general.file_type"])).name.removeprefix("MOSTLY_")
    except (KeyError, ValueError, TypeError):
        quantization = ""
    details = ModelDetails(family=arch, families=[arch] if arch else None,
                           parameter_size=human_number(parameters) if parameters else "",
                           quantization_level=quantization)
    return details, info, template


def model_facts(entry: ModelEntry) -> ModelFacts:
    """What the entry's file says of itself (read once per file version); blocking: run it off the loop."""
    path = shipped_model_path() if entry.source == SHIPPED_MODEL else Path(entry.source)
    if path is None or not path.is_file():  # a shipped model that is a directory, or a file not assembled yet
        return ModelFacts(modified=entry.created, details=ModelDetails(format=""))
    stat = path.stat()
    details, info, template = _gguf_facts(path.resolve(), stat.st_mtime)
    digest = path.name.removeprefix("sha256-") if path.name.startswith("sha256-") else ""
    return ModelFacts(path=path, size=stat.st_size, modified=float(entry.created), digest=digest, details=details,
                      model_info=info, template=template)


def capabilities(entry: ModelEntry, thinks: bool) -> list[str]:
    if entry.kind == "embedding":
        return ["embedding"]
    return ["completion", "tools", *(["thinking"] if thinks else [])]
