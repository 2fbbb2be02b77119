"""Thinking output apart from the answer (server/text_stream.py's ReasoningSplitter, split_reasoning) and
Gemma 4's built-in turn format (models/text/chat_template.py)."""

from __future__ import annotations

import pytest

from models.text.chat_template import GEMMA4_TEMPLATE, ChatTemplate
from server.text_stream import GEMMA4_CHANNEL, THINK_TAGS, ReasoningSplitter, split_reasoning

THOUGHT = "<|channel>thought\nFirst, 2 + 2 is 4.<channel|>The answer is 4."


def test_whole_text() -> None:
    assert split_reasoning(THOUGHT) == ("First, 2 + 2 is 4.", "The answer is 4.")
    assert split_reasoning("No thinking here.") == (None, "No thinking here.")
    assert split_reasoning("<|channel>thought\n<channel|>Empty thought.") == (None, "Empty thought.")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_streamed_in_pieces_of_any_size(size: int) -> None:
    """Markers split across deltas are held back, never leaked into either side."""
    splitter = ReasoningSplitter()
    parts = [splitter.push(THOUGHT[i:i + size]) for i in range(0, len(THOUGHT), size)] + [splitter.flush()]
    assert "".join(r for r, _ in parts) == "First, 2 + 2 is 4."
    assert "".join(c for _, c in parts) == "The answer is 4."


def test_unfinished_thought_and_lookalikes() -> None:
    splitter = ReasoningSplitter()
    assert splitter.push("a <|cha") == ("", "a ")  # might start a marker: held back
    assert splitter.push("t") == ("", "<|chat")
    assert split_reasoning("<|channel>thought\ncut short") == ("cut short", "")


QWEN3_THOUGHT = "<think>\nFirst, 2 + 2 is 4.\n</think>\n\nThe answer is 4."


@pytest.mark.parametrize("size", [1, 3, 100])
def test_think_tags(size: int) -> None:
    """Qwen 3's <think> tags: no channel name to drop; whole and streamed give the same split."""
    assert split_reasoning(QWEN3_THOUGHT, THINK_TAGS) == ("\nFirst, 2 + 2 is 4.\n", "\n\nThe answer is 4.")
    assert split_reasoning("No thinking here.", THINK_TAGS) == (None, "No thinking here.")
    splitter = ReasoningSplitter(THINK_TAGS)
    parts = [splitter.push(QWEN3_THOUGHT[i:i + size]) for i in range(0, len(QWEN3_THOUGHT), size)]
    parts.append(splitter.flush())
    assert ("".join(r for r, _ in parts), "".join(c for _, c in parts)) == split_reasoning(QWEN3_THOUGHT, THINK_TAGS)
    assert split_reasoning(THOUGHT, GEMMA4_CHANNEL) == split_reasoning(THOUGHT)


def test_gemma4_turn_format() -> None:
    template = ChatTemplate(GEMMA4_TEMPLATE, bos_token="<bos>")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]
    assert template.render(messages) == ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n"
                                         "<|turn>model\nHello.<turn|>\n<|turn>user\n2+2?<turn|>\n<|turn>model\n")
    thinking = template.render(messages[1:2], enable_thinking=True)
    assert thinking == "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"


THINKING_SCRIPT = "<|channel>thought\nLet me see.<channel|>Hi there. "


@pytest.fixture()
def thinking_server(monkeypatch: pytest.MonkeyPatch):
    """The fake model (tests/server/fake_model.py) saying a Gemma 4 style thought, then an answer."""
    from config.settings import load_settings
    from server.app import create_app
    from server.services import chat
    from tests.server import fake_model
    from tests.server.live_server import ThreadServer

    monkeypatch.setattr(fake_model, "SCRIPT", THINKING_SCRIPT)
    monkeypatch.setattr(fake_model.FakeTokenizer, "chat_template", GEMMA4_TEMPLATE)
    monkeypatch.setattr(chat, "thinking_markers", lambda tokenizer: GEMMA4_CHANNEL)  # its byte vocabulary has none
    app = create_app(load_settings(env={"HEARTH_OLLAMA": "false"}), loader=fake_model.fake_loader())
    with ThreadServer(app) as server:
        yield server


def test_reasoning_content_through_the_api(thinking_server) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{thinking_server.url}/v1", api_key="unused", max_retries=0)
    request = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": len(THINKING_SCRIPT), "temperature": 0}
    message = client.chat.completions.create(**request).choices[0].message  # type: ignore[call-overload]
    assert (message.reasoning_content, message.content) == ("Let me see.", "Hi there. ")  # type: ignore[attr-defined]
    chunks = list(client.chat.completions.create(stream=True, **request))  # type: ignore[call-overload]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Let me see."
    assert "".join(d.content or "" for d in deltas) == "Hi there. "


def test_reasoning_effort_turns_thinking_on(thinking_server) -> None:
    """reasoning_effort other than "none" renders the template with enable_thinking (Gemma 4: <|think|>)."""
    import openai

    client = openai.OpenAI(base_url=f"{thinking_server.url}/v1", api_key="unused", max_retries=0)
    request = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    plain = client.chat.completions.create(**request).usage  # type: ignore[call-overload]
    thinking = client.chat.completions.create(reasoning_effort="high", **request).usage  # type: ignore[call-overload]
    # the fake tokenizer has a token per byte: the extra system turn is "<|turn>system\n<|think|>\n<turn|>\n"
    extra = len("<|turn>system\n<|think|>\n<turn|>\n".encode())
    assert thinking.prompt_tokens - plain.prompt_tokens == extra
