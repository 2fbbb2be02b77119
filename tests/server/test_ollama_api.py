"""Ollama's native API (/api/...) on fake models: every endpoint, streamed (NDJSON) and not, the options mapping,
format, tools and thinking translated to and from the internal requests, and errors in Ollama's shape.

The fake chat model writes "Hello world. " over and over (greedy), one token per byte; the fake embedding model
gives 8 dimensions. Constrained decoding needs a real vocabulary, so format and tool replies are checked here by
their translation (the real model's replies are in test_ollama_client.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.settings import load_settings
from server.app import create_app
from server.errors import InvalidRequest
from server.schemas.chat import ChatCompletion, ChatCompletionRequest
from server.schemas.ollama import Message
from server.services.ollama import (
    DEFAULT_SAMPLING,
    OllamaService,
    Timings,
    chat_messages,
    format_fields,
    internal_request,
    reasoning_effort,
    sampling_fields,
)
from server.services.ollama_models import human_number
from tests.models.ollama_store import add_model, fake_gguf
from tests.server.all_fakes import FAKE_LOADERS, fake_app
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

MODEL = "gemma-3-270m"
EMBEDDER = "all-minilm-l6-v2"
GREEDY = {"temperature": 0, "num_predict": 5}
METRICS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
           "eval_duration")


def wait_ready(server: ThreadServer) -> None:
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/ready").status_code != 200:
        assert time.monotonic() < deadline, "the fake models did not load"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ollama store holding `gemma3:270m` (a GGUF header only: the fake loader ignores the file)."""
    root = tmp_path_factory.mktemp("ollama")
    add_model(root / "store", fake_gguf(root / "gemma3.gguf", "gemma3"), "gemma3", "270m")
    return root / "store"


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[ThreadServer]:
    with ThreadServer(fake_app(env={"HEARTH_OLLAMA": "true", "OLLAMA_MODELS": str(store)})) as srv:
        wait_ready(srv)
        yield srv


def post(server: ThreadServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines() if line]


def error_of(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


def assert_final(line: dict[str, Any], reason: str, eval_count: int) -> None:
    assert line["done"] is True and line["done_reason"] == reason
    assert all(isinstance(line[key], int) for key in METRICS), line
    assert line["eval_count"] == eval_count and line["prompt_eval_count"] > 0
    assert line["total_duration"] >= line["prompt_eval_duration"] + line["eval_duration"]


# -- /api/chat ----------------------------------------------------------------------------------------------------
def test_chat_streams_ndjson_by_default_and_ends_with_the_statistics(server: ThreadServer) -> None:
    out = lines(post(server, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                          "options": GREEDY}))
    assert all(not line["done"] and line["message"]["role"] == "assistant" for line in out[:-1])
    assert "".join(line["message"]["content"] for line in out) == "Hello"
    assert out[0]["model"] == MODEL and out[0]["created_at"].endswith("Z")
    assert_final(out[-1], "length", 5)


def test_chat_without_streaming_is_one_object(server: ThreadServer) -> None:
    response = post(server, "/api/chat", {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                                                         {"role": "user", "content": "hi"}],
                                          "stream": False, "options": {**GREEDY, "stop": ["o"]}})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["message"] == {"role": "assistant", "content": "Hell"}
    assert_final(body, "stop", body["eval_count"])


def test_chat_history_with_a_tool_call_and_its_result_renders(server: ThreadServer) -> None:
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "11 degrees", "tool_name": "get_weather"},
                {"role": "user", "content": "Thanks"}]
    body = post(server, "/api/chat", {"model": MODEL, "messages": messages, "stream": False,
                                      "options": GREEDY}).json()
    assert body["message"]["content"] == "Hello" and body["done"] is True


def test_empty_messages_load_the_model_and_keep_alive_0_unloads_it(server: ThreadServer) -> None:
    loaded = post(server, "/api/chat", {"model": MODEL, "messages": []}).json()
    assert loaded["done"] is True and loaded["done_reason"] == "load"
    assert loaded["message"] == {"role": "assistant", "content": ""}
    unloaded = post(server, "/api/chat", {"model": "gemma3:270m", "messages": [], "keep_alive": 0}).json()
    assert unloaded["done_reason"] == "unload"


def test_keep_alive_0_on_an_empty_request_unloads_a_loaded_model(server: ThreadServer) -> None:
    def running() -> set[str]:
        return {m["name"] for m in httpx.get(f"{server.url}/api/ps").json()["models"]}

    assert post(server, "/api/generate", {"model": "gemma3:270m"}).json()["done_reason"] == "load"
    assert "gemma3:270m" in running()
    assert post(server, "/api/generate", {"model": "gemma3:270m", "keep_alive": 0}).json()["done_reason"] == "unload"
    deadline = time.monotonic() + 10
    while "gemma3:270m" in running():
        assert time.monotonic() < deadline, "the model is still loaded"
        time.sleep(0.05)


def test_think_on_a_model_that_does_not_think_is_ollamas_400(server: ThreadServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "think": True}
    assert error_of(post(server, "/api/chat", body), 400) == '"gemma-3-270m" does not support thinking'
    # think false is the thinking switch turned off: nothing to refuse
    assert post(server, "/api/chat", {**body, "think": False, "stream": False, "options": GREEDY}).status_code == 200


def test_images_are_refused_with_a_clear_400(server: ThreadServer) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "what is this?", "images": ["iVBORw0KGgo="]}]}
    assert "does not accept images" in error_of(post(server, "/api/chat", chat), 400)
    generate = {"model": MODEL, "prompt": "what is this?", "images": ["iVBORw0KGgo="]}
    assert "does not accept images" in error_of(post(server, "/api/generate", generate), 400)


def test_an_error_after_the_stream_started_is_a_last_error_line() -> None:
    settings = load_settings(path=None, env={"HEARTH_OLLAMA": "false"}, overrides=FAKE_LOADERS)
    with ThreadServer(create_app(settings, loader=fake_loader(fail_after=3), warm_up=False)) as srv:
        wait_ready(srv)
        out = lines(post(srv, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                           "options": GREEDY}))
    # the text before the fault, a line a token or fewer where tokens waited together (server/jobs.py)
    assert "".join(line["message"]["content"] for line in out[:-1]) == "Hel" and 1 <= len(out) - 1 <= 3
    assert set(out[-1]) == {"error"} and "GPU" in out[-1]["error"]


def test_a_client_that_leaves_a_stream_frees_the_worker() -> None:
    with ThreadServer(fake_app(step_s=0.02)) as srv:
        wait_ready(srv)
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": 200}}
        with httpx.stream("POST", f"{srv.url}/api/chat", json=body, timeout=60) as response:
            next(response.iter_lines())
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.url}/health").json()["models"][MODEL]["running"]:
            assert time.monotonic() < deadline, "the abandoned generation is still running"
            time.sleep(0.05)


# -- /api/generate ------------------------------------------------------------------------------------------------
def test_generate_streams_a_user_turn_and_raw_sends_the_prompt_as_it_is(server: ThreadServer) -> None:
    templated = lines(post(server, "/api/generate", {"model": MODEL, "prompt": "hi", "options": GREEDY}))
    assert "".join(line["response"] for line in templated) == "Hello"
    assert_final(templated[-1], "length", 5)
    raw = lines(post(server, "/api/generate", {"model": MODEL, "prompt": "hi", "raw": True, "options": GREEDY}))
    assert "".join(line["response"] for line in raw) == "Hello"
    # the raw prompt is its tokens alone (BOS and 2 bytes); the templated one has the turn markers around it
    assert raw[-1]["prompt_eval_count"] == 3 < templated[-1]["prompt_eval_count"]


def test_generate_without_streaming_with_a_system_prompt(server: ThreadServer) -> None:
    plain = post(server, "/api/generate", {"model": MODEL, "prompt": "hi", "stream": False, "options": GREEDY}).json()
    with_system = post(server, "/api/generate", {"model": MODEL, "prompt": "hi", "system": "Be brief.",
                                                 "stream": False, "options": GREEDY}).json()
    assert plain["response"] == with_system["response"] == "Hello"
    assert with_system["prompt_eval_count"] > plain["prompt_eval_count"]
    assert_final(plain, "length", 5)
    raw = post(server, "/api/generate", {"model": MODEL, "prompt": "hi", "raw": True, "stream": False,
                                         "options": {"temperature": 0, "num_predict": 20, "stop": [" "]}}).json()
    assert (raw["response"], raw["done_reason"]) == ("Hello", "stop")


def test_generate_with_an_empty_prompt_loads_the_model(server: ThreadServer) -> None:
    body = post(server, "/api/generate", {"model": MODEL}).json()
    assert (body["response"], body["done"], body["done_reason"]) == ("", True, "load")
    assert post(server, "/api/generate", {"model": MODEL, "keep_alive": 0}).json()["done_reason"] == "unload"


@pytest.mark.parametrize(("extra", "message"), [
    ({"raw": True, "system": "x"}, "raw mode does not support template, system, or context"),
    ({"template": "{{ .Prompt }}"}, "template is not supported"),
    ({"context": [1, 2, 3]}, "context is not supported"),
    ({"suffix": "return x"}, '"gemma-3-270m" does not support insert'),
])
def test_generate_refuses_what_it_cannot_honour(server: ThreadServer, extra: dict[str, Any], message: str) -> None:
    assert message in error_of(post(server, "/api/generate", {"model": MODEL, "prompt": "hi", **extra}), 400)


def test_logprobs_per_token_as_ollama_sends_them(server: ThreadServer) -> None:
    ask = {"model": MODEL, "logprobs": True, "top_logprobs": 2, "options": {"temperature": 0, "num_predict": 3}}
    chat = post(server, "/api/chat", {**ask, "messages": [{"role": "user", "content": "hi"}], "stream": False}).json()
    assert [lp["token"] for lp in chat["logprobs"]] == ["H", "e", "l"]
    assert all(len(lp["top_logprobs"]) == 2 and lp["logprob"] <= 0 for lp in chat["logprobs"])
    streamed = lines(post(server, "/api/generate", {**ask, "prompt": "hi", "raw": True}))
    assert [lp["token"] for line in streamed[:-1] for lp in line["logprobs"]] == ["H", "e", "l"]
    assert all(len(lp["top_logprobs"]) == 2 for line in streamed[:-1] for lp in line["logprobs"])


# -- options, format, think, tools: the translation ---------------------------------------------------------------
def test_options_map_to_sampling_with_ollamas_defaults() -> None:
    defaults = sampling_fields(None, "max_completion_tokens")
    assert {k: defaults[k] for k in DEFAULT_SAMPLING} == DEFAULT_SAMPLING
    assert defaults["max_completion_tokens"] is None and "seed" not in defaults
    fields = sampling_fields({"temperature": 5, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 42, "num_predict": 9,
                              "stop": ["\n"], "repeat_penalty": 1.2, "presence_penalty": 1.5,
                              "frequency_penalty": -3, "num_ctx": 4096, "mirostat": 2, "no_such_option": "x"},
                             "max_tokens")
    assert fields == {"temperature": 2.0, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 42, "max_tokens": 9,
                      "stop": ["\n"], "repetition_penalty": 1.2, "presence_penalty": 1.5, "frequency_penalty": -2.0}
    assert sampling_fields({"num_predict": -1, "seed": -1}, "max_tokens")["max_tokens"] is None
    request = internal_request(ChatCompletionRequest, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                                       **fields})
    params = request.sampling_params()
    assert (params.temperature, params.top_k, params.seed, params.repetition_penalty) == (2.0, 7, 42, 1.2)


@pytest.mark.parametrize(("options", "message"), [
    ({"temperature": "hot"}, 'option "temperature" must be of type float32'),
    ({"num_predict": True}, 'option "num_predict" must be of type integer'),
    ({"stop": "x"}, 'option "stop" must be of an array of strings'),
    ({"use_mmap": 1}, 'option "use_mmap" must be of type boolean'),
])
def test_options_of_the_wrong_type_are_ollamas_400(server: ThreadServer, options: dict[str, Any],
                                                   message: str) -> None:
    body = {"model": MODEL, "prompt": "hi", "options": options}
    assert error_of(post(server, "/api/generate", body), 400) == message


def test_a_seed_out_of_range_is_a_400_naming_the_option(server: ThreadServer) -> None:
    body = {"model": MODEL, "prompt": "hi", "options": {"seed": 2**70}}
    assert "options.seed" in error_of(post(server, "/api/generate", body), 400)


def test_format_think_and_messages_translate() -> None:
    assert format_fields("json") == {"response_format": {"type": "json_object"}}
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert format_fields(schema) == {"json_schema": schema}
    assert format_fields("") == format_fields(None) == {}
    assert [reasoning_effort(v) for v in (None, True, False, "low", "max")] == [None, "medium", "none", "low", "high"]
    converted = chat_messages([
        Message(role="ASSISTANT", content="", tool_calls=[{"function": {"name": "f", "arguments": {"a": 1}}}]),
        Message(role="tool", content="2", tool_name="f", tool_call_id="call_1")])
    call = converted[0]["tool_calls"][0]
    assert converted[0]["role"] == "assistant" and call["type"] == "function" and call["id"]
    assert call["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert converted[1] == {"role": "tool", "content": "2", "name": "f", "tool_call_id": "call_1"}


def test_a_format_other_than_json_or_a_schema_is_a_400(server: ThreadServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "format": "yaml"}
    assert "format" in error_of(post(server, "/api/chat", body), 400)


def test_tool_calls_come_back_as_ollama_shapes_them() -> None:
    """The chat service's reply (arguments a JSON string) becomes Ollama's message (arguments an object)."""
    completion = ChatCompletion.model_validate({
        "id": "c", "created": 0, "model": MODEL, "usage": {"prompt_tokens": 4, "completion_tokens": 9,
                                                           "total_tokens": 13},
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Tokyo"}'}}]}}]})
    reply = OllamaService._chat_reply("llama3.2", completion, Timings()).model_dump(exclude_none=True)
    assert reply["message"] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Tokyo"}}}]}
    assert reply["done_reason"] == "stop" and reply["eval_count"] == 9


def test_streamed_tool_calls_arrive_whole_before_the_done_line() -> None:
    async def chunks() -> AsyncIterator[dict[str, Any]]:
        def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

        yield delta({"role": "assistant", "content": ""})
        yield delta({"content": "Let me look."})
        yield delta({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": ""}}]})
        yield delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]})
        yield delta({"tool_calls": [{"index": 0, "function": {"arguments": '"Tokyo"}'}}]})
        yield delta({}, "tool_calls")
        yield {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 12, "total_tokens": 16}}

    async def collect() -> list[dict[str, Any]]:
        return [line async for line in OllamaService._chat_stream("m", chunks(), Timings())]

    out = asyncio.run(collect())
    assert [line["message"].get("content") for line in out] == ["Let me look.", "", ""]
    assert out[1]["message"]["tool_calls"] == [
        {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Tokyo"}}}]
    assert out[1]["done"] is False and out[2]["done"] is True and out[2]["done_reason"] == "stop"
    assert out[2]["eval_count"] == 12


def test_tools_reach_the_chat_request() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                             "parameters": {"type": "object", "properties": {}}}}
    request = internal_request(ChatCompletionRequest, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                                       "tools": [tool]})
    assert request.tool_mode == "auto" and request.tools[0].function.name == "get_weather"  # type: ignore[index]


def test_internal_validation_errors_name_the_ollama_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        internal_request(ChatCompletionRequest, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                                 "max_completion_tokens": 0})
    assert caught.value.param == "options.num_predict"


# -- embeddings ---------------------------------------------------------------------------------------------------
def test_embed_a_string_a_list_and_nothing(server: ThreadServer) -> None:
    one = post(server, "/api/embed", {"model": EMBEDDER, "input": "hello"}).json()
    assert one["model"] == EMBEDDER and len(one["embeddings"]) == 1 and len(one["embeddings"][0]) == 8
    assert one["prompt_eval_count"] > 0 and one["total_duration"] >= one["load_duration"] >= 0
    two = post(server, "/api/embed", {"model": EMBEDDER, "input": ["hello", "world"]}).json()
    assert two["embeddings"][0] == one["embeddings"][0] and len(two["embeddings"]) == 2
    assert post(server, "/api/embed", {"model": EMBEDDER, "input": []}).json()["embeddings"] == []
    assert post(server, "/api/embed", {"model": EMBEDDER, "input": ""}).json()["embeddings"] == []


def test_embed_dimensions_and_truncate(server: ThreadServer) -> None:
    short = post(server, "/api/embed", {"model": EMBEDDER, "input": "hello", "dimensions": 4}).json()
    assert len(short["embeddings"][0]) == 4
    long = "word " * 100  # past the fake's 64 tokens: cut by default, as Ollama does
    assert post(server, "/api/embed", {"model": EMBEDDER, "input": long}).status_code == 200
    assert "context length" in error_of(post(server, "/api/embed", {"model": EMBEDDER, "input": long,
                                                                     "truncate": False}), 400)


def test_legacy_embeddings(server: ThreadServer) -> None:
    body = post(server, "/api/embeddings", {"model": EMBEDDER, "prompt": "hello"}).json()
    embed = post(server, "/api/embed", {"model": EMBEDDER, "input": "hello"}).json()
    assert body == {"embedding": embed["embeddings"][0]}
    assert post(server, "/api/embeddings", {"model": EMBEDDER, "prompt": ""}).json() == {"embedding": []}


def test_a_model_of_the_wrong_kind_is_ollamas_400(server: ThreadServer) -> None:
    assert error_of(post(server, "/api/embed", {"model": MODEL, "input": "x"}), 400) == \
        '"gemma-3-270m" does not support embeddings'
    assert error_of(post(server, "/api/chat", {"model": EMBEDDER, "messages": [{"role": "user", "content": "x"}]}),
                    400) == '"all-minilm-l6-v2" does not support chat'


# -- models ---------------------------------------------------------------------------------------------------------
def test_tags_lists_configured_and_store_models_without_aliases(server: ThreadServer) -> None:
    models = {m["name"]: m for m in httpx.get(f"{server.url}/api/tags").json()["models"]}
    assert {MODEL, EMBEDDER, "gemma3:270m"} <= set(models) and "gpt-4o-mini" not in models
    stored = models["gemma3:270m"]
    assert stored["model"] == "gemma3:270m" and len(stored["digest"]) == 64 and stored["size"] > 0
    assert stored["details"]["family"] == "gemma3" and stored["details"]["format"] == "gguf"
    assert stored["modified_at"].endswith("Z")


def test_show_has_details_template_and_model_info(server: ThreadServer) -> None:
    body = post(server, "/api/show", {"model": "gemma3:270m"}).json()
    assert body["model_info"]["general.architecture"] == "gemma3" and body["details"]["family"] == "gemma3"
    assert body["template"] and "FROM " in body["modelfile"]
    assert body["capabilities"][0] == "completion"
    assert post(server, "/api/show", {"name": "gemma3:270m"}).json()["details"] == body["details"]
    assert error_of(post(server, "/api/show", {"model": "nope:1b"}), 404) == "model 'nope:1b' not found"
    assert error_of(post(server, "/api/show", {}), 400) == "model is required"
    assert len(error_of(post(server, "/api/show", {"model": "a" * 5000}), 404)) < 300


def test_ps_lists_loaded_models_with_their_expiry(server: ThreadServer) -> None:
    post(server, "/api/embed", {"model": EMBEDDER, "input": "x", "keep_alive": "10m"})
    models = {m["name"]: m for m in httpx.get(f"{server.url}/api/ps").json()["models"]}
    assert MODEL in models and EMBEDDER in models
    assert models[MODEL]["expires_at"] > models[EMBEDDER]["expires_at"]  # preloaded: never
    assert models[EMBEDDER]["context_length"] == 64 and "size_vram" in models[EMBEDDER]


def test_version_and_root(server: ThreadServer) -> None:
    assert set(httpx.get(f"{server.url}/api/version").json()) == {"version"}
    root = httpx.get(f"{server.url}/", headers={"Accept": "application/json"})
    assert (root.status_code, root.text) == (200, "Ollama is running")
    head = httpx.head(f"{server.url}/")
    assert head.status_code == 200 and head.content == b""
    browser = httpx.get(f"{server.url}/", headers={"Accept": "text/html"})
    assert (browser.status_code, browser.headers["location"]) == (307, "/playground")


# -- names and errors -----------------------------------------------------------------------------------------------
def test_ollama_names_resolve_and_unknown_ones_are_ollamas_404(server: ThreadServer) -> None:
    body = post(server, "/api/generate", {"model": "gemma3:270m", "prompt": "hi", "stream": False,
                                          "options": GREEDY}).json()
    assert body["model"] == "gemma3:270m" and body["response"] == "Hello"
    for path, request in (("/api/chat", {"messages": [{"role": "user", "content": "x"}]}),
                          ("/api/generate", {"prompt": "x"}), ("/api/embed", {"input": "x"})):
        assert error_of(post(server, path, {"model": "gemma3", **request}), 404) == "model 'gemma3' not found"
        assert error_of(post(server, path, request), 400) == "model is required"


def test_invalid_bodies_are_errors_in_ollamas_shape(server: ThreadServer) -> None:
    assert error_of(httpx.post(f"{server.url}/api/chat", content=b"{not json"), 400)
    assert error_of(post(server, "/api/chat", {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}),
                    400)
    assert error_of(post(server, "/api/embed", {"model": EMBEDDER, "input": 3}), 400)
    assert error_of(post(server, "/api/chat", {"model": MODEL, "messages": "hi"}), 400)
    assert error_of(httpx.get(f"{server.url}/api/no-such-route"), 404)
    # unknown fields are ignored, as Ollama's JSON decoding does
    body = {"model": MODEL, "prompt": "hi", "stream": False, "options": GREEDY, "shift": True, "truncate": False}
    assert post(server, "/api/generate", body).status_code == 200


def test_human_number_as_ollama_prints_it() -> None:
    assert [human_number(n) for n in (268_098_176, 8_000_000_000, 7_615_616_512, 999)] == \
        ["268.10M", "8B", "7.6B", "999"]
