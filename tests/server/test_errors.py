"""The error hierarchy: OpenAI's error object for every failure, the client's mistakes as 4xx only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gpu.errors import GPUFailure
from server.errors import InvalidRequest, QueueFull, error_body, param_name, to_hearth_error
from tests.models.ollama_store import add_model, fake_gguf
from tests.server.fake_model import SCRIPT, fake_loader
from tests.server.test_app import CHAT, health, start, wait_until


@pytest.mark.parametrize(("loc", "name"), [
    (("body", "temperature"), "temperature"),
    (("body", "messages", 0, "content"), "messages[0].content"),
    (("body", "messages", 1, "content", "list[ContentPart]", 0, "type"), "messages[1].content[0].type"),
    (("body", "stop", "str"), "stop"),
    (("body", "logit_bias", "50"), "logit_bias.50"),
    (("body",), None),
])
def test_param_names_from_validation_locations(loc: tuple, name: str | None) -> None:
    assert param_name(loc) == name


def test_gpu_failures_and_bugs_are_500s_that_do_not_leak_details() -> None:
    gpu = to_hearth_error(GPUFailure("submitting commands", "matvec", RuntimeError("device lost")))
    assert (gpu.status, gpu.type, gpu.code) == (500, "server_error", "gpu_failure")
    bug = to_hearth_error(KeyError("secret internal detail"))
    assert bug.status == 500 and "secret" not in bug.message
    # A RuntimeError is not the client's mistake either (no 400 by exception type or message text).
    assert to_hearth_error(RuntimeError("invalid value")).status == 500


def test_error_body_is_openais_shape() -> None:
    error, body = error_body(InvalidRequest("bad n", param="n"))
    assert body == {"error": {"message": "bad n", "type": "invalid_request_error", "param": "n", "code": None}}
    error, body = error_body(QueueFull("m", 5))
    assert error.status == 429 and error.headers == {"Retry-After": "5"}


@pytest.fixture(scope="module")
def failing() -> Iterator[object]:
    srv = start(fail_after=2)
    yield srv
    srv.__exit__()


def test_gpu_failure_mid_stream_is_an_error_event_then_done(failing: object) -> None:
    with httpx.stream("POST", f"{failing.url}/v1/chat/completions",  # type: ignore[attr-defined]
                      json={**CHAT, "max_tokens": 8, "stream": True}) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert response.status_code == 200
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["type"], error["code"]) == ("server_error", "gpu_failure")
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-2]) == SCRIPT[:2]


def test_gpu_failure_without_stream_is_500_and_the_server_goes_on(failing: object) -> None:
    client = openai.OpenAI(base_url=f"{failing.url}/v1", api_key="x", max_retries=0)  # type: ignore[attr-defined]
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(**CHAT, max_tokens=8)  # type: ignore[arg-type]
    assert raised.value.body["code"] == "gpu_failure"  # type: ignore[index]
    assert client.chat.completions.create(**CHAT, max_tokens=1).choices[0].message.content == "H"  # type: ignore


def test_ollama_models_load_on_demand_and_idle_ones_make_room(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for name in ("one", "two"):
        add_model(store, fake_gguf(tmp_path / f"{name}.gguf", "gemma3"), name, "1b")
    srv = start(env={"HEARTH_OLLAMA": "true", "OLLAMA_MODELS": str(store), "HEARTH_MAX_LOADED_MODELS": "2"},
                loader=fake_loader())
    try:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        assert {"one:1b", "two:1b"} <= {m.id for m in client.models.list().data}
        reply = client.completions.create(model="one:1b", prompt="a", max_tokens=2)
        assert (reply.model, reply.choices[0].text) == ("one:1b", SCRIPT[:2])
        assert set(health(srv)) == {"gemma-3-270m", "one:1b"}
        client.completions.create(model="two:1b", prompt="a", max_tokens=2)
        # The limit is 2: the idle on-demand model went; the preloaded default stays.
        assert wait_until(lambda: set(health(srv)) == {"gemma-3-270m", "two:1b"})
    finally:
        srv.__exit__()
