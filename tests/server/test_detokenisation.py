"""Generated control and reserved ("<unusedN>") tokens reach the client as no text, streamed or not, while they
still count as generated tokens, and Gemma 4's thinking markers (user-defined pieces) still split reasoning from
content: the fake model (tests/server/fake_model.py) with a real models.text.tokenizer vocabulary, saying a script of
token ids."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gguf import TokenType

from models.text.tokenizer import GGUFVocab, Tokenizer

PIECES = ["H", "i", "<start_of_turn>", "!", "<unused3936>"]
MARKERS = ["<|channel>", "<channel|>"]
TYPES = {"<start_of_turn>": TokenType.CONTROL, "<end_of_turn>": TokenType.CONTROL,
         "<unused3936>": TokenType.NORMAL,  # as a converter other than llama.cpp's may type them
         # as models/gemma/gemma4.py makes them
         "<|channel>": TokenType.USER_DEFINED, "<channel|>": TokenType.USER_DEFINED}
BYTE0 = 3  # the first byte piece, "<0x00>"


def _tokenizer() -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES + MARKERS + ["<end_of_turn>"]
    types = np.full(len(tokens), TokenType.NORMAL, np.int32)
    types[:3] = TokenType.CONTROL
    types[3:259] = TokenType.BYTE
    for piece, kind in TYPES.items():
        types[tokens.index(piece)] = kind
    return Tokenizer(GGUFVocab(model="llama", pre="default", tokens=tokens, scores=np.zeros(len(tokens), np.float32),
                               types=types, merges=None, bos_id=1, eos_id=2, eot_id=None, eom_id=None, add_bos=True,
                               add_eos=False, add_space_prefix=False, chat_template=None))


TOKENIZER = _tokenizer()
_ALL = TOKENIZER.ids_to_pieces(range(TOKENIZER.vocab_size))
IDS = {piece: _ALL.index(piece) for piece in PIECES + MARKERS}
SCRIPT = [IDS[p] for p in PIECES]  # what the model says, token after token; each test sets it


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    import openai

    from config.settings import load_settings
    from server.app import create_app
    from tests.server import fake_model
    from tests.server.live_server import ThreadServer

    def logits(session: Any) -> np.ndarray:
        row = np.zeros(TOKENIZER.vocab_size, np.float32)
        row[SCRIPT[session._generated % len(SCRIPT)]] = 20.0
        return row

    def load(source: str, **kwargs: Any) -> Any:
        model = fake_model.fake_loader()(source, **kwargs)
        model.tokenizer, model.vocab_size = TOKENIZER, TOKENIZER.vocab_size
        return model

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fake_model.FakeSession, "_logits", logits)
        app = create_app(load_settings(env={"HEARTH_OLLAMA": "false"}), loader=load)
        with ThreadServer(app) as server:
            yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_chat_renders_control_and_unused_tokens_as_nothing(client: Any) -> None:
    SCRIPT[:] = [IDS[p] for p in PIECES]
    request = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": len(PIECES), "temperature": 0}
    whole = client.chat.completions.create(**request)
    assert whole.choices[0].message.content == "Hi!"
    assert whole.usage.completion_tokens == len(PIECES)  # the unprinted tokens were generated all the same
    chunks = list(client.chat.completions.create(stream=True, **request))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi!"


def test_completions_render_control_and_unused_tokens_as_nothing(client: Any) -> None:
    SCRIPT[:] = [IDS[p] for p in PIECES]
    request = {"model": "gemma-3-270m", "prompt": "hi", "max_tokens": len(PIECES), "temperature": 0}
    assert client.completions.create(**request).choices[0].text == "Hi!"
    chunks = list(client.completions.create(stream=True, **request))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hi!"


def test_thinking_markers_stay_text_for_the_reasoning_split(client: Any) -> None:
    """The markers are user-defined pieces, printed, so the chat service splits at them; control and unused
    tokens inside and after the thought print nothing."""
    SCRIPT[:] = [IDS["<|channel>"], *(BYTE0 + b for b in b"thought\n"), IDS["H"], IDS["<unused3936>"],
                 IDS["<channel|>"], IDS["i"], IDS["<start_of_turn>"], IDS["!"]]
    request = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": len(SCRIPT), "temperature": 0}
    message = client.chat.completions.create(**request).choices[0].message
    assert (message.reasoning_content, message.content) == ("H", "i!")
    deltas = [c.choices[0].delta for c in client.chat.completions.create(stream=True, **request) if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "H"
    assert "".join(d.content or "" for d in deltas) == "i!"
