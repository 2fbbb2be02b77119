"""The real-model server the API test modules share: `python -m server` on the shipped Gemma 3 270M, started once
per session (loading and warming it up takes tens of seconds on lavapipe)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from models.registry import shipped_model_path
from tests.models.ollama_store import add_model
from tests.server.live_server import SubprocessServer


@pytest.fixture(scope="session")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubprocessServer]:
    gguf = shipped_model_path()
    if gguf is None or not gguf.is_file():
        pytest.skip("the shipped Gemma 3 270M is not assembled (make setup)")
    tmp = tmp_path_factory.mktemp("api")
    store = tmp / "ollama"
    add_model(store, gguf, "gemma3", "270m")
    server = SubprocessServer(tmp / "server.log", env={"OLLAMA_MODELS": str(store), "HEARTH_LOG_LEVEL": "info"})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def real_client(real_api: SubprocessServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{real_api.url}/v1", api_key="unused", max_retries=0, timeout=600)
