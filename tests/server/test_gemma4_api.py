"""Gemma 4 through the API by its Ollama name: a fixture installed as `gemma4:e2b` in a temporary Ollama store
(Ollama's layout: tokenizer "llama" with BPE merges, no chat template, vision and audio tensors in the blob),
served by a `python -m server` subprocess that loads it on the first request, driven by the openai SDK.

The fixture is tiny and random (scripts/make_gemma4_fixtures.py), so its replies are noise: the test checks
the plumbing (name lookup, Gemma 4's turn format, streaming), the parity tests check the numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from scripts.make_gemma4_fixtures import FIXTURES, write_gguf
from tests.models.ollama_store import add_model
from tests.server.live_server import SubprocessServer

GREEDY = {"temperature": 0}
pytestmark = pytest.mark.heavy  # ~40 s on lavapipe: a server subprocess loads the model on the first request


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    tmp = tmp_path_factory.mktemp("gemma4_api")
    gguf = write_gguf(FIXTURES["e2b"], tmp / "e2b_q4_k_ollama.gguf", "q4_k", "ollama")
    store = tmp / "ollama"
    add_model(store, gguf, "gemma4", "e2b")
    config = tmp / "hearth.toml"  # the shipped default is not loaded: only the Gemma 4 model is
    config.write_text('[[models]]\nid = "gemma-3-270m"\nsource = "gemma-3-270m"\npreload = false\n')
    # models load on their first request, compiling only what a short prompt and a decode step run: on lavapipe
    # compiling ahead dispatches every pipeline once (tests/models/test_engine.py checks that), a JIT of each
    server = SubprocessServer(tmp / "server.log", env={"OLLAMA_MODELS": str(store), "HEARTH_CONFIG": str(config),
                                                       "HEARTH_COMPILE_AHEAD": "false"})
    server.start()
    yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    server.stop()


def test_ollama_name_streams_a_chat_reply(client: openai.OpenAI) -> None:
    assert "gemma4:e2b" in [m.id for m in client.models.list().data]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the cat sat"}]
    whole = client.chat.completions.create(model="gemma4:e2b", messages=messages, max_tokens=6,  # type: ignore
                                           **GREEDY)
    choice = whole.choices[0]
    assert whole.model == "gemma4:e2b" and choice.finish_reason in ("length", "stop")
    assert whole.usage is not None and whole.usage.prompt_tokens > 10  # the system and user turns, Gemma 4 style
    chunks = list(client.chat.completions.create(model="gemma4:e2b", messages=messages, max_tokens=6,  # type: ignore
                                                 stream=True, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (choice.message.content or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason

