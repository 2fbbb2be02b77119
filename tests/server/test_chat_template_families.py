"""The model families' own chat templates rendered by Hearth give transformers' text (golden file).

tests/golden/chat_templates/renderings.json comes from scripts/make_chat_template_golden.py (transformers'
render_jinja_template on the same templates and conversations); these tests only read it. The conversations go
through the server's own message schema, as a request's would.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from models.text.chat_template import ChatTemplate, ChatTemplateError
from models.text.tokenizer import Tokenizer
from server.chat_worker import chat_template_of
from server.schemas.chat import ChatMessage, Tool
from tests.models.test_tokenizer_stops import write_family_gguf

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "chat_templates"
RENDERINGS = json.loads((GOLDEN / "renderings.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in RENDERINGS["cases"] + RENDERINGS["thinking_cases"]}
PARAMS = [(template, case) for template, entry in RENDERINGS["templates"].items() for case in entry["renderings"]]


def _render(template_name: str, case: dict, template: ChatTemplate | None = None) -> str:
    if template is None:
        entry = RENDERINGS["templates"][template_name]
        template = ChatTemplate((GOLDEN / template_name).read_text(encoding="utf-8"), bos_token=entry["bos_token"],
                                eos_token=entry["eos_token"])
    assert not template.builtin
    messages = [ChatMessage.model_validate(m).for_template() for m in case["messages"]]
    tools = [Tool.model_validate(t).model_dump(exclude_none=True) for t in case.get("tools", [])]
    return template.render(messages, tools=tools or None, add_generation_prompt=case["add_generation_prompt"],
                           **case["kwargs"])


def test_every_family_has_every_case() -> None:
    assert len(RENDERINGS["templates"]) == 8
    for name, entry in RENDERINGS["templates"].items():
        assert (GOLDEN / name).exists()
        assert {c["name"] for c in RENDERINGS["cases"]} <= set(entry["renderings"])
    assert sum("text" in r for e in RENDERINGS["templates"].values() for r in e["renderings"].values()) >= 45


@pytest.mark.parametrize(("template_name", "case_name"), PARAMS)
def test_rendering_equals_transformers(template_name: str, case_name: str) -> None:
    expected = RENDERINGS["templates"][template_name]["renderings"][case_name]
    case = CASES[case_name]
    if expected.get("error") == "System role not supported":
        # transformers raises; Hearth puts the system text at the start of the next user turn (as llama.cpp's
        # template polyfill does), so the same conversation renders as it would with the text moved there by hand
        system = [m for m in case["messages"] if m["role"] == "system"]
        moved = [m for m in case["messages"] if m["role"] != "system"]
        first_user = next(i for i, m in enumerate(moved) if m["role"] == "user")
        moved[first_user] = {**moved[first_user],
                             "content": "\n".join(m["content"] for m in system) + "\n" + moved[first_user]["content"]}
        try:
            by_hand = _render(template_name, {**case, "messages": moved})
        except ChatTemplateError as error:  # a conversation the template rejects for another reason (tool turns)
            with pytest.raises(ChatTemplateError, match=re.escape(str(error).split(": ", 1)[1])):
                _render(template_name, case)
        else:
            assert _render(template_name, case) == by_hand
    elif "error" in expected:
        with pytest.raises(ChatTemplateError, match=expected["error"]):
            _render(template_name, case)
    else:
        assert _render(template_name, case) == expected["text"]


def test_llama_3_2_dates_the_prompt_today() -> None:
    """Without a date_string the Llama 3.2 template asks strftime_now for today's date."""
    case = {**CASES["system_user"], "kwargs": {}}
    before = datetime.now().strftime("%d %b %Y")
    text = _render("meta-llama-Llama-3.2-3B-Instruct.jinja", case)
    assert f"Today Date: {before}\n" in text or f"Today Date: {datetime.now().strftime('%d %b %Y')}\n" in text


# Family vocabulary (tests/models/test_tokenizer_stops.py) -> its template.
FAMILY_TEMPLATES = {
    "llama-3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "smollm3": "HuggingFaceTB-SmolLM3-3B.jinja",
    "phi-3.5": "microsoft-Phi-3.5-mini-instruct.jinja",
    "gemma-2": "google-gemma-2-2b-it.jinja",
}


@pytest.mark.parametrize(("family", "template_name"), FAMILY_TEMPLATES.items())
def test_template_from_the_gguf_with_its_special_tokens(family: str, template_name: str, tmp_path: Path) -> None:
    """As the server loads it: the template and the bos/eos pieces it is given come from the GGUF (chat_template_of),
    and the prompt gets one BOS, from the template or from the tokenizer."""
    path = tmp_path / f"{family}.gguf"
    write_family_gguf(family, path, (GOLDEN / template_name).read_text(encoding="utf-8"))
    tok = Tokenizer.from_gguf(path)
    template = chat_template_of(tok)
    entry = RENDERINGS["templates"][template_name]
    assert template.eos_token == entry["eos_token"]
    for case_name, expected in entry["renderings"].items():
        if "error" in expected:
            continue
        text = _render(template_name, CASES[case_name], template)
        assert text == expected["text"], case_name
        # ChatService._prompt_ids: a template that writes BOS gets none from the tokenizer.
        writes_bos = bool(template.bos_token) and text.startswith(template.bos_token)
        ids = tok.encode(text, add_bos=not writes_bos)
        assert ids.count(tok.bos_id) == (1 if writes_bos or tok.encode("") else 0), case_name
