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

from models.formats.gguf_file import GGUFFile
from models.text.tokenizer import Tokenizer
from models.text.tool_calls import format_for
from server.chat_worker import chat_template_of
from tests.models.ollama_store import add_model
from tests.server.live_server import SubprocessServer

FAMILIES_DIR = Path(__file__).resolve().parents[1] / "golden" / "families"
META = json.loads((FAMILIES_DIR / "meta.json").read_text())["families"] if (FAMILIES_DIR / "meta.json").exists() else {}
# Ollama name (model, tag) -> fixture
OLLAMA_NAMES = {("llama3.2", "1b"): "llama3", ("qwen2.5", "0.5b"): "qwen2", ("qwen3", "0.6b"): "qwen3",
                ("mistral", "latest"): "mistral", ("smollm3", "latest"): "smollm3", ("phi3", "latest"): "phi3",
                ("gemma", "2b"): "gemma", ("gemma2", "2b"): "gemma2", ("lfm2.5-thinking", "1.2b"): "lfm2",
                ("qwen3.5", "0.8b"): "qwen35"}
SYSTEM, USER = "You are a terse assistant.", "What is the capital of France?"  # as the fixtures recorded it
GREEDY = {"temperature": 0}
# The families' own tool-call formats (models/text/tool_calls: FORMATS), each through its template and tokenizer.
TOOL_FORMATS = {"qwen3:0.6b": "qwen", "qwen2.5:0.5b": "qwen", "llama3.2:1b": "llama3", "mistral:latest": "mistral",
                "gemma2:2b": "gemma3", "lfm2.5-thinking:1.2b": "lfm2", "qwen3.5:0.8b": "qwen3_coder"}


def _split(name: str) -> tuple[str, str]:
    model, tag = name.split(":")
    return model, tag


def _tools_id(name: str) -> str:
    """The id under which the tool tests serve a family's fixture with a longer context."""
    return "tools-" + name.replace(":", "-")

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
    config.write_text('[[models]]\nid = "gemma-3-270m"\nsource = "gemma-3-270m"\npreload = false\n' + "".join(
        # tool prompts outgrow the fixtures' 256 trained positions in their tiny vocabularies
        f'[[models]]\nid = "{_tools_id(name)}"\nsource = "{FAMILIES_DIR / f"{OLLAMA_NAMES[_split(name)]}.q8_0.gguf"}"\n'
        f'context_length = 1024\npreload = false\n' for name in TOOL_FORMATS))
    # models load on their first request, compiling only what a short prompt and a decode step run: on lavapipe
    # compiling ahead dispatches every pipeline once (tests/models/test_engine.py checks that), a JIT of each
    server = SubprocessServer(tmp / "server.log", env={"OLLAMA_MODELS": str(store), "HEARTH_CONFIG": str(config),
                                                       "HEARTH_COMPILE_AHEAD": "false"})
    server.start()
    yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    server.stop()


@pytest.mark.parametrize("name", [f"{m}:{t}" for (m, t), family in OLLAMA_NAMES.items() if family in META])
def test_ollama_name_streams_a_chat_reply_in_its_template(client: openai.OpenAI, name: str) -> None:
    model, tag = name.split(":")
    family = OLLAMA_NAMES[(model, tag)]
    listed = [m.id for m in client.models.list().data]
    assert name in listed or (tag == "latest" and model in listed)
    # every family takes a system message: templates without a system role (Gemma 1, 2) get it in the user turn
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
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


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["unit", "days"], "additionalProperties": False}}}


@pytest.mark.parametrize("name", [n for n in TOOL_FORMATS if OLLAMA_NAMES[_split(n)] in META])
def test_tool_call_in_the_familys_format_then_the_result_gets_a_reply(client: openai.OpenAI, name: str) -> None:
    """tool_choice required: the family's format is constrained, parsed into tool_calls (whole and streamed alike),
    and the call and the tool's result render back through the family's template for the next turn."""
    family = OLLAMA_NAMES[_split(name)]
    tokenizer = Tokenizer.from_gguf(FAMILIES_DIR / f"{family}.q8_0.gguf")
    architecture = GGUFFile(FAMILIES_DIR / f"{family}.q8_0.gguf").arch
    assert format_for(tokenizer, architecture, chat_template_of(tokenizer).source).name == TOOL_FORMATS[name]
    ask = [{"role": "user", "content": "What is the weather in Paris this week?"}]
    request = {"model": _tools_id(name), "messages": ask, "tools": [WEATHER], "tool_choice": "required",
               "parallel_tool_calls": False, "max_tokens": 160, **GREEDY}
    whole = client.chat.completions.create(**request)  # type: ignore[call-overload]
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls or []) == 1, choice
    call = choice.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and arguments["unit"] in ("celsius", "fahrenheit")
    assert set(arguments) == {"unit", "days"} and 1 <= arguments["days"] <= 7
    with client.chat.completions.stream(**request) as stream:  # type: ignore[arg-type]
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert [(c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls or []] == [
        (call.function.name, call.function.arguments)]
    history = [*ask, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18})}]
    second = client.chat.completions.create(model=_tools_id(name), messages=history, tools=[WEATHER],  # type: ignore[arg-type]
                                            tool_choice="none", max_tokens=4, **GREEDY)
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].finish_reason in ("stop", "length")
