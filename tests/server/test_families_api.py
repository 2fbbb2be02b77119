"""The decoder families through the API by their Ollama names: each family's fixture (tests/golden/families, converted
by llama.cpp's converter with the family's real chat template) installed in a temporary Ollama store under the name
people pull it by, served by a `python -m server` subprocess, driven by the openai SDK.

The fixtures are tiny and random, so their replies are noise: the test checks the plumbing (name lookup, the
family's own template and tokenizer through the server: the prompt's token count equals transformers' rendering,
streaming equal to the whole reply), the parity tests check the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from models.text.tokenizer import Tokenizer
from server.chat_worker import chat_template_of
from tests.models.ollama_store import add_model
from tests.server.live_server import SubprocessServer

FAMILIES_DIR = Path(__file__).resolve().parents[1] / "golden" / "families"
META = json.loads((FAMILIES_DIR / "meta.json").read_text())["families"] if (FAMILIES_DIR / "meta.json").exists() else {}
# Ollama name (model, tag) -> fixture
OLLAMA_NAMES = {("llama3.2", "1b"): "llama3", ("qwen2.5", "0.5b"): "qwen2", ("qwen3", "0.6b"): "qwen3",
                ("mistral", "latest"): "mistral", ("smollm3", "latest"): "smollm3", ("phi3", "latest"): "phi3",
                ("gemma", "2b"): "gemma", ("gemma2", "2b"): "gemma2"}
SYSTEM, USER = "You are a terse assistant.", "What is the capital of France?"  # as the fixtures recorded it
GREEDY = {"temperature": 0}

pytestmark = [pytest.mark.heavy,  # a server subprocess loads each model on its first request
              pytest.mark.skipif(not META, reason="tests/golden/families is missing")]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    tmp = tmp_path_factory.mktemp("families_api")
    store = tmp / "ollama"
    for (model, tag), family in OLLAMA_NAMES.items():
        if family in META:
            add_model(store, FAMILIES_DIR / f"{family}.q8_0.gguf", model, tag)
    config = tmp / "hearth.toml"  # the shipped default is not loaded: only the store's models are
    config.write_text('[[models]]\nid = "gemma-3-270m"\nsource = "gemma-3-270m"\npreload = false\n')
    server = SubprocessServer(tmp / "server.log", env={"OLLAMA_MODELS": str(store), "HEARTH_CONFIG": str(config)})
    server.start()
    yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    server.stop()


@pytest.mark.parametrize("name", [f"{m}:{t}" for (m, t), family in OLLAMA_NAMES.items() if family in META])
def test_ollama_name_streams_a_chat_reply_in_its_template(client: openai.OpenAI, name: str) -> None:
    model, tag = name.split(":")
    family = OLLAMA_NAMES[(model, tag)]
    listed = [m.id for m in client.models.list().data]
    assert name in listed or (tag == "latest" and model in listed)
    messages = [{"role": "user", "content": USER}]
    if "user_only" not in META[family]["chat_kwargs"]:
        messages.insert(0, {"role": "system", "content": SYSTEM})
    request = {"model": name, "messages": messages, "max_tokens": 6, **GREEDY}
    whole = client.chat.completions.create(**request)  # type: ignore[call-overload]
    choice = whole.choices[0]
    assert choice.finish_reason in ("length", "stop")
    tokenizer = Tokenizer.from_gguf(FAMILIES_DIR / f"{family}.q8_0.gguf")
    template = chat_template_of(tokenizer)
    # the family's template, as the parity tests check it; thinking is off unless a request asks (reasoning_effort)
    text = template.render(messages, enable_thinking=False)
    ids = tokenizer.encode(text, add_bos=not (template.bos_token and text.startswith(template.bos_token)))
    assert whole.usage is not None and whole.usage.prompt_tokens == len(ids)
    chunks = list(client.chat.completions.create(stream=True, **request))  # type: ignore
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    reasoning = "".join((getattr(c.choices[0].delta, "reasoning_content", None) or "") for c in chunks if c.choices)
    assert streamed == (choice.message.content or "")
    assert reasoning == (getattr(choice.message, "reasoning_content", None) or "")
