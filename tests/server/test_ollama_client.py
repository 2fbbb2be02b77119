"""Ollama's API through the official `ollama` Python client against the live server on the shipped Gemma 3 270M
(`gemma3:270m` in the test's Ollama store; the real_api fixture): chat, generate, streamed and not, structured
output, embeddings, the model list, show, ps and version. Replies are a few greedy tokens each.
"""

from __future__ import annotations

import json

import ollama
import pytest

from tests.server.live_server import SubprocessServer

MODEL = "gemma3:270m"
EMBEDDER = "all-minilm-l6-v2"
FEW = {"temperature": 0, "num_predict": 3}


@pytest.fixture(scope="module")
def client(real_api: SubprocessServer) -> ollama.Client:
    return ollama.Client(host=real_api.url, timeout=600)


def assert_statistics(reply: ollama.ChatResponse | ollama.GenerateResponse, tokens: int) -> None:
    assert reply.done is True and reply.done_reason in ("stop", "length")
    assert reply.eval_count is not None and 1 <= reply.eval_count <= tokens
    assert reply.prompt_eval_count and reply.prompt_eval_duration and reply.total_duration
    assert reply.total_duration >= reply.prompt_eval_duration + (reply.eval_duration or 0)


def test_chat(client: ollama.Client) -> None:
    reply = client.chat(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], options=FEW)
    assert reply.message.role == "assistant" and reply.message.content
    assert_statistics(reply, 3)


def test_chat_streamed(client: ollama.Client) -> None:
    parts = list(client.chat(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], options=FEW,
                             stream=True))
    assert all(not p.done for p in parts[:-1]) and "".join(p.message.content or "" for p in parts).strip()
    assert_statistics(parts[-1], 3)
    whole = client.chat(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], options=FEW)
    assert "".join(p.message.content or "" for p in parts) == whole.message.content  # greedy: the same reply


def test_chat_structured_output(client: ollama.Client) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    reply = client.chat(model=MODEL, messages=[{"role": "user", "content": "Is Paris in France? Answer in JSON."}],
                        format=schema, options={"temperature": 0, "num_predict": 12})
    assert set(json.loads(reply.message.content or "")) == {"ok"} and reply.done_reason == "stop"


def test_generate(client: ollama.Client) -> None:
    reply = client.generate(model=MODEL, prompt="The capital of France is", options=FEW)
    assert reply.response and reply.model == MODEL
    assert_statistics(reply, 3)
    raw = client.generate(model=MODEL, prompt="The capital of France is", raw=True, options=FEW)
    assert raw.response and raw.prompt_eval_count < reply.prompt_eval_count  # no chat turn around it
    streamed = list(client.generate(model=MODEL, prompt="The capital of France is", raw=True, options=FEW,
                                    stream=True))
    assert "".join(p.response for p in streamed) == raw.response
    assert_statistics(streamed[-1], 3)


def test_generate_loads_with_an_empty_prompt(client: ollama.Client) -> None:
    reply = client.generate(model=MODEL)
    assert reply.done is True and reply.done_reason == "load" and reply.response == ""


def test_embed(client: ollama.Client) -> None:
    reply = client.embed(model=EMBEDDER, input=["The sky is blue.", "Grass is green."])
    assert len(reply.embeddings) == 2 and len(reply.embeddings[0]) == 384
    legacy = client.embeddings(model=EMBEDDER, prompt="The sky is blue.")
    assert legacy.embedding == pytest.approx(reply.embeddings[0], abs=1e-6)


def test_list_show_ps_and_version(client: ollama.Client) -> None:
    listed = {m.model: m for m in client.list().models}
    details = listed[MODEL].details
    assert details is not None and (details.family, details.quantization_level) == ("gemma3", "Q4_K_M")
    assert details.parameter_size == "268.10M" and listed[MODEL].size and listed[MODEL].digest
    shown = client.show(MODEL)
    assert shown.modelinfo is not None and shown.modelinfo["general.architecture"] == "gemma3"
    assert shown.modelinfo["gemma3.context_length"] > 0 and shown.template
    assert shown.capabilities and "completion" in shown.capabilities
    running = client.ps().models
    assert any(m.details is not None and m.details.family == "gemma3" and m.expires_at for m in running)
    assert client._client.get("/api/version").json()["version"]


def test_unknown_model_is_ollamas_404(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="no-such-model:1b", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404 and caught.value.error == "model 'no-such-model:1b' not found"
