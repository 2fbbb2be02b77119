"""The API on the real model: a `python -m server` subprocess on loopback, driven by the official openai SDK.

One server serves the whole module (loading and warming up the 270M takes tens of seconds on lavapipe),
and generations are kept to a few tokens: a decode step takes about half a second there.
Token ids below come from the shipped GGUF's vocabulary, which its package pins by sha256.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.live_server import ROOT, SubprocessServer

PROMPT = "The capital of France is"
PROMPT_TOKENS = 6  # <bos> The capital of France is
PARIS = 9079  # "▁Paris"
EOS = 1  # <eos>
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def api(real_api: SubprocessServer) -> SubprocessServer:
    return real_api  # the session's server (tests/server/conftest.py)


@pytest.fixture(scope="module")
def client(real_client: openai.OpenAI) -> openai.OpenAI:
    return real_client


def complete(client: openai.OpenAI, **kwargs: object) -> openai.types.Completion:
    return client.completions.create(**{"model": "gemma-3-270m", "prompt": PROMPT, **kwargs})  # type: ignore


def test_startup_logged_the_adapter_and_the_load(api: SubprocessServer) -> None:
    log = api.log()
    assert "GPU adapter" in log
    assert re.search(r"loading gemma-3-270m: +100%", log)
    assert "gemma-3-270m ready in" in log


def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list().data]
    assert ids[:3] == ["gemma-3-270m", "gpt-4o-mini", "gpt-3.5-turbo"]
    assert "gemma3:270m" in ids
    assert client.models.retrieve("gemma3:270m").owned_by == "ollama"
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("no-such-model")
    assert raised.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_completion_greedy_whole_and_streamed(client: openai.OpenAI) -> None:
    whole = complete(client, max_tokens=4, **GREEDY)
    text = whole.choices[0].text
    assert text and whole.choices[0].finish_reason == "length"
    assert whole.usage is not None
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens) == (6, 4, 10)
    assert whole.model == "gemma-3-270m" and whole.object == "text_completion"

    chunks = list(complete(client, max_tokens=4, stream=True, stream_options={"include_usage": True}, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_token_prompt_echo_and_logprobs(client: openai.OpenAI) -> None:
    ids = [2, 818, 5279, 529, 7001, 563]  # PROMPT's tokens, BOS first
    text = complete(client, max_tokens=2, **GREEDY).choices[0].text
    by_ids = client.completions.create(model="gemma-3-270m", prompt=ids, max_tokens=2, logprobs=2, **GREEDY)
    choice = by_ids.choices[0]
    assert choice.text == text
    assert choice.logprobs is not None and "".join(choice.logprobs.tokens or []) == text
    assert len(choice.logprobs.top_logprobs or []) == 2 and all(len(t) == 2 for t in choice.logprobs.top_logprobs)
    assert choice.logprobs.text_offset == [0, len(choice.logprobs.tokens[0])]  # type: ignore[index]
    echoed = complete(client, max_tokens=2, echo=True, **GREEDY)
    assert echoed.choices[0].text == PROMPT + text


def test_chat_with_every_role_and_text_parts(client: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "developer", "content": "Be polite."},
        {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And 3+3?"},
    ]
    reply = client.chat.completions.create(model="gemma-3-270m", messages=messages, max_completion_tokens=3,
                                           user="tester", **GREEDY)  # type: ignore[arg-type]
    assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3  # type: ignore[union-attr]
    assert reply.usage.prompt_tokens > 20  # type: ignore[union-attr]

    stream = client.chat.completions.create(model="gemma-3-270m", messages=messages, max_tokens=3, stream=True,
                                            **GREEDY)  # type: ignore[arg-type]
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage is None


def test_alias_and_ollama_names_reach_the_default_model(client: openai.OpenAI) -> None:
    text = complete(client, max_tokens=2, **GREEDY).choices[0].text
    for name in ("gpt-4o-mini", "gemma3:270m"):
        reply = client.completions.create(model=name, prompt=PROMPT, max_tokens=2, **GREEDY)
        assert reply.model == name and reply.choices[0].text == text


def test_seeded_sampling_repeats_and_n_uses_seed_plus_i(client: openai.OpenAI) -> None:
    params = {"max_tokens": 3, "temperature": 1.2, "top_p": 0.95, "seed": 1234, "presence_penalty": 0.5,
              "frequency_penalty": 0.3, "extra_body": {"top_k": 50, "min_p": 0.01, "repetition_penalty": 1.1}}
    first = complete(client, n=2, **params)
    again = complete(client, n=2, **params)
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert [c.index for c in first.choices] == [0, 1]
    second_alone = complete(client, **{**params, "seed": 1235})
    assert second_alone.choices[0].text == first.choices[1].text


def test_chat_streams_n_choices_with_their_indexes(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="gemma-3-270m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, n=2, seed=5, stream=True))
    finished = {c.choices[0].index: c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason}
    assert finished == {0: "length", 1: "length"}


def test_a_repeated_prompt_reports_its_cached_tokens(api: SubprocessServer, client: openai.OpenAI) -> None:
    """The second request with the same long system prompt finds its whole pages (128 positions) before the last
    token in the prefix cache: usage reports them as OpenAI does, /metrics counts them, the reply is the same."""
    system = " ".join(f"Rule {i}: answer in one word, and never mention rule {i + 1}." for i in range(20))
    body = {"model": "gemma-3-270m", "messages": [{"role": "system", "content": system},
                                                   {"role": "user", "content": "Name a colour."}],
            "max_tokens": 2, **GREEDY}

    def cached_metric() -> float:
        text = httpx.get(f"{api.url}/metrics").text
        found = re.search(r'^hearth_prompt_tokens_cached_total\{model="gemma-3-270m"\} (\S+)$', text, re.M)
        return float(found.group(1)) if found else 0.0

    before = cached_metric()
    first = client.chat.completions.create(**body)  # type: ignore[call-overload]
    second = client.chat.completions.create(**body)  # type: ignore[call-overload]
    prompt = first.usage.prompt_tokens
    assert prompt > 2 * 128 and first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == (prompt - 1) // 128 * 128
    assert second.choices[0].message.content == first.choices[0].message.content
    assert cached_metric() - before == (prompt - 1) // 128 * 128
    streamed = list(client.chat.completions.create(**body, stream=True,  # type: ignore[call-overload]
                                                   stream_options={"include_usage": True}))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens == (prompt - 1) // 128 * 128
    answer = client.responses.create(model="gemma-3-270m", instructions=system, input="Name a colour.",
                                     max_output_tokens=16, temperature=0)
    assert answer.usage.input_tokens_details.cached_tokens == (prompt - 1) // 128 * 128


def test_logit_bias_and_chat_logprobs(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="gemma-3-270m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, logit_bias={str(PARIS): 100},
        logprobs=True, top_logprobs=3, **GREEDY)
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 2
    assert [t.token for t in content] == [" Paris", " Paris"]
    assert reply.choices[0].message.content == " Paris Paris"
    assert all(len(t.top_logprobs) == 3 and t.bytes == list(t.token.encode()) for t in content)


def test_end_of_sequence_finishes_with_stop(client: openai.OpenAI) -> None:
    reply = complete(client, max_tokens=4, logit_bias={str(EOS): 100}, **GREEDY)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == "" and reply.usage.completion_tokens == 0  # type: ignore[union-attr]


def test_stop_strings_match_across_tokens_and_are_never_sent(client: openai.OpenAI) -> None:
    probe = complete(client, max_tokens=4, logprobs=0, **GREEDY).choices[0]
    tokens = probe.logprobs.tokens  # type: ignore[union-attr]
    assert tokens is not None and len(tokens) >= 3
    stop = tokens[1][-2:] + tokens[2][:2]  # straddles the boundary between the second and third tokens
    expected = probe.text[:probe.text.find(stop)]
    whole = complete(client, max_tokens=4, stop=[stop, "never-generated"], **GREEDY).choices[0]
    assert (whole.text, whole.finish_reason) == (expected, "stop")
    streamed = list(complete(client, max_tokens=4, stop=stop, stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in streamed) == expected
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_greedy_api_output_equals_hearth_generate(client: openai.OpenAI) -> None:
    api_text = complete(client, max_tokens=6, **GREEDY).choices[0].text
    run = subprocess.run([sys.executable, "-m", "server", "generate", "--max-tokens", "6", "--temperature", "0",
                          PROMPT], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout == api_text
    assert "loading" in run.stderr  # tqdm's bar goes to stderr


def test_disconnected_stream_frees_the_worker(api: SubprocessServer, client: openai.OpenAI) -> None:
    stream = complete(client, max_tokens=200, stream=True, **GREEDY)
    next(iter(stream))
    stream.close()
    # The worker notices at its next token (about half a second on lavapipe); allow for a busy machine.
    deadline = time.monotonic() + 30
    while httpx.get(f"{api.url}/health").json()["models"]["gemma-3-270m"]["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(f"{api.url}/health").json()["models"]["gemma-3-270m"] == {
        "state": "ready", "queued": 0, "running": 0, "load_progress": 1.0, "error": None, "replicas": None}


def _chat(**kwargs: object) -> dict[str, object]:
    return {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "Hi"}], **kwargs}


@pytest.mark.parametrize(("body", "param"), [
    (_chat(temperature=3), "temperature"),
    (_chat(top_p=0), "top_p"),
    (_chat(n=0), "n"),
    (_chat(n=9), "n"),
    (_chat(max_tokens=0), "max_tokens"),
    (_chat(presence_penalty=-3), "presence_penalty"),
    (_chat(frequency_penalty=2.5), "frequency_penalty"),
    (_chat(top_logprobs=2), "top_logprobs"),
    (_chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (_chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (_chat(logit_bias={"999999999": 1}), "logit_bias"),
    (_chat(logit_bias={"x": 1}), "logit_bias"),
    (_chat(logit_bias={"5": 101}), "logit_bias.5"),
    (_chat(stream_options={"include_usage": True}), "stream_options"),
    (_chat(seed="abc"), "seed"),
    (_chat(top_k=-2), "top_k"),
    (_chat(min_p=1.5), "min_p"),
    (_chat(repetition_penalty=0), "repetition_penalty"),
    (_chat(response_format={"type": "xml"}), "response_format.type"),
    (_chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
    (_chat(frobnicate=1), "frobnicate"),
    ({"model": "gemma-3-270m", "messages": []}, "messages"),
    ({"model": "gemma-3-270m"}, "messages"),
    ({"messages": [{"role": "user", "content": "Hi"}]}, "model"),
    ({"model": "gemma-3-270m", "messages": [{"role": "wizard", "content": "Hi"}]}, "messages[0].role"),
    ({"model": "gemma-3-270m", "messages": [{"role": "user"}]}, "messages[0].content"),
    ({"model": "gemma-3-270m", "messages": [{"role": "user", "content": [{"type": "image_url",
                                                                           "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
])
def test_invalid_chat_parameters_are_400_naming_the_field(client: openai.OpenAI, body: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.post("/chat/completions", body=body, cast_to=object)
    error = raised.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error", error  # type: ignore[index]


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "gemma-3-270m", "prompt": "x", "suffix": "y"}, "suffix"),
    ({"model": "gemma-3-270m", "prompt": "x", "best_of": 2}, "n"),
    ({"model": "gemma-3-270m", "prompt": "x", "echo": True, "logprobs": 1}, "logprobs"),
    ({"model": "gemma-3-270m", "prompt": []}, "prompt"),
    ({"model": "gemma-3-270m", "prompt": [1, 300000]}, "prompt"),
    ({"model": "gemma-3-270m", "prompt": {"text": "x"}}, "prompt"),
    ({"model": "gemma-3-270m", "prompt": "x", "logprobs": 30}, "logprobs"),
])
def test_invalid_completion_parameters_are_400_naming_the_field(client: openai.OpenAI, body: dict,
                                                                param: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.post("/completions", body=body, cast_to=object)
    assert raised.value.body["param"] == param, raised.value.body  # type: ignore[index]


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as chat:
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.NotFoundError) as completion:
        client.completions.create(model="nope:latest", prompt="x")
    for raised in (chat, completion):
        assert raised.value.body["code"] == "model_not_found" and raised.value.body["param"] == "model"  # type: ignore


def test_context_length_exceeded(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model="gemma-3-270m", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=10**6)
    with pytest.raises(openai.BadRequestError) as completion:
        complete(client, max_tokens=10**6)
    assert chat.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert chat.value.body["param"] == "messages"  # type: ignore[index]
    assert completion.value.body["code"] == "context_length_exceeded"  # type: ignore[index]


def test_malformed_json_and_oversized_bodies(api: SubprocessServer) -> None:
    headers = {"content-type": "application/json"}
    bad = httpx.post(f"{api.url}/v1/chat/completions", content=b'{"model": ', headers=headers)
    assert bad.status_code == 400 and "could not parse the JSON" in bad.json()["error"]["message"]
    huge = httpx.post(f"{api.url}/v1/completions", content=b'{"prompt": "' + b"x" * (5 << 20) + b'"}',
                      headers=headers)
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    assert httpx.get(f"{api.url}/nowhere").json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{api.url}/ready").status_code == 200  # still serving


def _readme_curl_blocks() -> list[str]:
    """The READMEs' curl examples of the JSON endpoints. The audio ones upload files and answer with audio or
    subtitles: tests/server/test_transcriptions.py and test_speech.py run those endpoints' forms instead."""
    blocks = []
    for readme in (ROOT / "README.md", ROOT / "server" / "README.md"):
        if readme.is_file():
            blocks += [b for b in re.findall(r"```(?:sh|bash)\n(.*?)```", readme.read_text(), re.S)
                       if b.lstrip().startswith("curl") and "/v1/audio/" not in b]
    return blocks


@pytest.mark.parametrize("block", _readme_curl_blocks())
def test_readme_curl_examples(api: SubprocessServer, block: str) -> None:
    command = block.replace("http://127.0.0.1:8000", api.url)
    run = subprocess.run(["bash", "-c", command.replace("curl ", "curl -sS --fail-with-body ", 1)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    if "data: " in run.stdout:
        events = [line[6:] for line in run.stdout.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and all("error" not in json.loads(e) for e in events[:-1])
    else:
        assert "error" not in json.loads(run.stdout)


def test_readme_has_curl_examples() -> None:
    assert len(_readme_curl_blocks()) >= 4


def test_health_and_root(api: SubprocessServer) -> None:
    assert httpx.get(f"{api.url}/health").json()["status"] == "ok"
    assert httpx.get(f"{api.url}/").text == "Ollama is running"


def test_server_log_has_no_tracebacks(api: SubprocessServer) -> None:
    """Every client mistake above was answered without an unhandled exception (run last in this module)."""
    assert "Traceback" not in api.log(), Path(api.log_path).read_text()[-4000:]
