"""Write tests/golden/chat_templates/renderings.json: transformers' renderings of the model families' chat templates.

Run with a Python that has transformers (not a project dependency; /work/main/.venv has 5.x):

    python scripts/make_chat_template_golden.py [--out PATH]
    python scripts/make_chat_template_golden.py --sweep DIR   # compare Hearth and transformers on DIR/*.jinja

The sweep renders the same cases with both on every template in a folder (llama.cpp's models/templates/ holds
70) and prints where they differ; it writes nothing.

The templates are llama.cpp's copies of the models' own (tests/golden/chat_templates/*.jinja, see SOURCE.md there).
Each case is a conversation in OpenAI's wire format. The messages a template gets are what Hearth's server makes of
them (ChatMessage.for_template, then ChatTemplate.render's tool-call arguments as objects); the conversion is written
out again below, so the expected text comes from transformers alone. A template that refuses a conversation (Gemma 2
and a system message) is recorded with its error message.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import transformers
from jinja2 import TemplateError
from transformers.utils.chat_template_utils import render_jinja_template

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "chat_templates"

# template file -> the special tokens of the model's tokenizer_config.json
FAMILIES = {
    "meta-llama-Llama-3.2-3B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.1-8B-Instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"bos_token": "", "eos_token": "<|im_end|>"},
    "Qwen-Qwen3-0.6B.jinja": {"bos_token": "", "eos_token": "<|im_end|>"},
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
    "HuggingFaceTB-SmolLM3-3B.jinja": {"bos_token": "", "eos_token": "<|im_end|>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "google-gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>"},
}
THINKING = {"Qwen-Qwen3-0.6B.jinja", "HuggingFaceTB-SmolLM3-3B.jinja"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are a concise assistant."}
TOOL_TURNS = [
    SYSTEM,
    {"role": "user", "content": "What's the weather in Zürich?"},
    # Mistral's template wants nine-character alphanumeric call ids.
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call00001", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "unit": "celsius"}'}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": '{"temperature": 21, "sky": "sunny"}'},
]
# A fixed date for Llama 3's "Today Date" (the 3.2 template would otherwise print strftime_now's).
DATE = {"date_string": "26 Jul 2024"}

CASES = [
    {"name": "system_user", "messages": [SYSTEM, {"role": "user", "content": "Hello! 你好"}],
     "add_generation_prompt": True, "kwargs": DATE},
    {"name": "multi_turn", "messages": [
        SYSTEM, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"},
        {"role": "user", "content": "  Another one?  "}], "add_generation_prompt": True, "kwargs": DATE},
    {"name": "multi_turn_no_system", "messages": [
        {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"}], "add_generation_prompt": True, "kwargs": DATE},
    {"name": "multi_turn_no_system_no_prompt", "messages": [
        {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}],
     "add_generation_prompt": False, "kwargs": DATE},
    {"name": "tools_first_turn", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
     "tools": [WEATHER_TOOL], "add_generation_prompt": True, "kwargs": DATE},
    {"name": "tools_call_and_result", "messages": TOOL_TURNS, "tools": [WEATHER_TOOL], "add_generation_prompt": True,
     "kwargs": DATE},
]
THINKING_CASES = [
    {"name": f"thinking_{flag}".lower(), "messages": [
        SYSTEM, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another one?"}], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": flag}}
    for flag in (False, True)
]


def template_messages(messages: list[dict]) -> list[dict]:
    """The messages as Hearth's server hands them to a template: content as a string ("" for a content-less tool
    call), name/tool_calls/tool_call_id only when present, tool-call arguments as objects."""
    out = []
    for wire in messages:
        message = {"role": wire["role"], "content": wire.get("content") or ""}
        for key in ("name", "tool_call_id"):
            if wire.get(key) is not None:
                message[key] = wire[key]
        if wire.get("tool_calls"):
            calls = copy.deepcopy(wire["tool_calls"])
            for call in calls:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            message["tool_calls"] = calls
        out.append(message)
    return out


def render(source: str, case: dict, tokens: dict) -> dict:
    """transformers' rendering of one case, or the template's error."""
    try:
        rendered, _ = render_jinja_template(
            conversations=[template_messages(case["messages"])], tools=case.get("tools"), chat_template=source,
            add_generation_prompt=case["add_generation_prompt"], **tokens, **case["kwargs"])
    except TemplateError as error:
        return {"error": str(error)}
    return {"text": rendered[0]}


def sweep(folder: Path) -> None:
    """Print every case where Hearth's rendering differs from transformers' (both refusing counts as agreeing)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from models.text.chat_template import ChatTemplate, ChatTemplateError
    from server.schemas.chat import ChatMessage, Tool

    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    differ = 0
    templates = sorted(folder.glob("*.jinja"))
    for path in templates:
        source = path.read_text(encoding="utf-8")
        template = ChatTemplate(source, **tokens)
        for case in CASES + THINKING_CASES:
            try:
                expected = render(source, case, tokens)
            except Exception as error:  # a template that crashes transformers: Hearth must refuse it too
                expected = {"error": repr(error)}
            try:
                messages = [ChatMessage.model_validate(m).for_template() for m in case["messages"]]
                tools = [Tool.model_validate(t).model_dump(exclude_none=True) for t in case.get("tools", [])]
                got = {"text": template.render(messages, tools=tools or None,
                                               add_generation_prompt=case["add_generation_prompt"], **case["kwargs"])}
            except ChatTemplateError as error:
                got = {"error": str(error)}
            if template.builtin or ("text" in expected or "text" in got) and expected != got:
                differ += 1
                print(f"{path.name} {case['name']}:\n  transformers {expected}\n  hearth       {got}")
    print(f"{differ} differences in {len(templates)} templates")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=GOLDEN / "renderings.json")
    parser.add_argument("--sweep", type=Path, help="compare Hearth with transformers on this folder's templates")
    args = parser.parse_args()
    if args.sweep:
        sweep(args.sweep)
        return
    golden = {"reference": f"transformers {transformers.__version__}: render_jinja_template", "cases": CASES,
              "thinking_cases": THINKING_CASES, "templates": {}}
    for name, tokens in FAMILIES.items():
        source = (GOLDEN / name).read_text(encoding="utf-8")
        cases = CASES + (THINKING_CASES if name in THINKING else [])
        golden["templates"][name] = {**tokens, "renderings": {c["name"]: render(source, c, tokens) for c in cases}}
    args.out.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {sum(len(t['renderings']) for t in golden['templates'].values())} renderings to {args.out}")


if __name__ == "__main__":
    main()
