"""Generated control and reserved ("<unusedN>") tokens reach the client as no text, streamed or not, while they
still count as generated tokens: the fake model (tests/server/fake_model.py) with a real models.tokenizer
vocabulary, scripted to say "H", "i", a control token, "!", an unused token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gguf import TokenType

from models.tokenizer import GGUFVocab, Tokenizer

PIECES = ["H", "i", "<start_of_turn>", "!", "<unused3936>"]
TYPES = {"<start_of_turn>": TokenType.CONTROL, "<end_of_turn>": TokenType.CONTROL,
         "<unused3936>": TokenType.NORMAL}  # as a converter other than llama.cpp's may type them


def _tokenizer() -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES + ["<end_of_turn>"]
    types = np.full(len(tokens), TokenType.NORMAL, np.int32)
    types[:3] = TokenType.CONTROL
    types[3:259] = TokenType.BYTE
    for piece, kind in TYPES.items():
        types[tokens.index(piece)] = kind
    return Tokenizer(GGUFVocab(model="llama", pre="default", tokens=tokens, scores=np.zeros(len(tokens), np.float32),
                               types=types, merges=None, bos_id=1, eos_id=2, eot_id=None, eom_id=None, add_bos=True,
                               add_eos=False, add_space_prefix=False, chat_template=None))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import openai

    from config.settings import load_settings
    from server.app import create_app
    from tests.server import fake_model
    from tests.server.live_server import ThreadServer

    tokenizer = _tokenizer()
    script = [tokenizer.vocab_size - 1 - len(PIECES) + i for i in range(len(PIECES))]
    assert tokenizer.ids_to_pieces(script) == PIECES

    def logits(session: Any) -> np.ndarray:
        row = np.zeros(tokenizer.vocab_size, np.float32)
        row[script[session._generated % len(script)]] = 20.0
        return row

    def load(source: str, **kwargs: Any) -> Any:
        model = fake_model.fake_loader()(source, **kwargs)
        model.tokenizer, model.vocab_size = tokenizer, tokenizer.vocab_size
        return model

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fake_model.FakeSession, "_logits", logits)
        app = create_app(load_settings(env={"HEARTH_OLLAMA": "false"}), loader=load)
        with ThreadServer(app) as server:
            yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_chat_renders_control_and_unused_tokens_as_nothing(client: Any) -> None:
    request = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": len(PIECES), "temperature": 0}
    whole = client.chat.completions.create(**request)
    assert whole.choices[0].message.content == "Hi!"
    assert whole.usage.completion_tokens == len(PIECES)  # the unprinted tokens were generated all the same
    chunks = list(client.chat.completions.create(stream=True, **request))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi!"


def test_completions_render_control_and_unused_tokens_as_nothing(client: Any) -> None:
    request = {"model": "gemma-3-270m", "prompt": "hi", "max_tokens": len(PIECES), "temperature": 0}
    assert client.completions.create(**request).choices[0].text == "Hi!"
    chunks = list(client.completions.create(stream=True, **request))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hi!"
