"""The model list: configured models, their aliases and the Ollama store's chat models."""

from __future__ import annotations

import asyncio

from models.registry import ModelEntry, ModelRegistry, has_audio_projector, has_projector
from server.errors import ModelNotFound
from server.schemas.models import Model, ModelList


def _model(entry: ModelEntry) -> Model:
    return Model(id=entry.id, created=entry.created, owned_by=entry.owned_by, alias_of=entry.alias_of,
                 input_modalities=input_modalities(entry))


def input_modalities(entry: ModelEntry) -> list[str] | None:
    """What a chat model's prompts may hold, known without loading it: images where its settings name a projector
    file or one goes with the model file (models/vision/projector.py), audio where that file has an audio tower
    (models/audio_encoder/projector.py); None for other kinds of model."""
    if entry.kind != "text":
        return None
    if not has_projector(entry):
        return ["text"]
    return ["text", "image", "audio"] if has_audio_projector(entry) else ["text", "image"]


class ModelService:
    """Answers /v1/models from the registry (the Ollama store is read on each call: a few small files)."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry

    async def list(self) -> ModelList:
        entries = await asyncio.to_thread(self.registry.list)
        seen: set[str] = set()
        unique = [e for e in entries if not (e.id in seen or seen.add(e.id))]  # type: ignore[func-returns-value]
        return ModelList(data=[_model(e) for e in unique])

    async def get(self, model_id: str) -> Model:
        entry = await asyncio.to_thread(self.registry.lookup, model_id)
        if entry is None:
            raise ModelNotFound(model_id, [e.id for e in await asyncio.to_thread(self.registry.list)])
        return _model(entry)
