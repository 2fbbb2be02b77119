"""Chat templates (models/text/chat_template.py): the built-in Gemma format and GGUF templates in the sandbox."""

from __future__ import annotations

import pytest

from models.text.chat_template import ChatTemplate, ChatTemplateError, render_chat


def test_builtin_gemma_format() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "tool", "content": "42"},
        {"role": "developer", "content": "Use digits."},
        {"role": "user", "content": "Sum?"},
    ]
    assert render_chat(messages, None) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\n```tool_output\n42\n```<end_of_turn>\n"  # the system prefix went to the first user turn
        "<start_of_turn>user\nUse digits.\n\nSum?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_builtin_format_with_only_a_system_message_and_no_generation_prompt() -> None:
    text = render_chat([{"role": "system", "content": "S"}], None, add_generation_prompt=False)
    assert text == "<bos><start_of_turn>user\nS<end_of_turn>\n"


def test_gguf_template_gets_bos_tools_and_hf_globals() -> None:
    source = (
        "{{ bos_token }}{% if tools %}[{{ tools | tojson }}]{% endif %}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    template = ChatTemplate(source, bos_token="<s>")
    assert not template.builtin
    text = template.render([{"role": "user", "content": "é"}], tools=[{"name": "f"}])
    assert text == '<s>[[{"name": "f"}]]<user>é<assistant>'


def test_template_errors_are_the_clients() -> None:
    source = "{% for m in messages %}{% if m.role != 'user' %}{{ raise_exception('only user') }}{% endif %}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="only user"):
        ChatTemplate(source).render([{"role": "system", "content": "x"}])


def test_sandbox_blocks_attribute_escapes() -> None:
    source = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render([{"role": "user", "content": "x"}])


def test_broken_template_falls_back_to_the_builtin_format() -> None:
    template = ChatTemplate("{% for %}")
    assert template.builtin
    assert template.render([{"role": "user", "content": "x"}]).endswith("<start_of_turn>model\n")


def test_transformers_extensions_and_globals() -> None:
    """What transformers' renderer offers templates beyond plain jinja2: loop controls, {% generation %},
    tojson's options, dict()."""
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% if m.content == 'stop' %}{% break %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
        "{{ dict(a=1, b=[2, 'é']) | tojson(separators=(',', ':'), sort_keys=true) }}"
        "{{ {'k': 1} | tojson(indent=2) }}{{ dict.fromkeys(['x'], 0) | tojson }}"
    )
    messages = [{"role": r, "content": c} for r, c in
                (("system", "s"), ("user", "a"), ("assistant", "b"), ("user", "stop"), ("user", "c"))]
    assert ChatTemplate(source).render(messages) == '[a][b]{"a":1,"b":[2,"é"]}{\n  "k": 1\n}{"x": 0}'


def test_namespace_refuses_underscore_names() -> None:
    assert ChatTemplate("{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}").render([]) == "2"
    for source in ("{% set ns = namespace(_x=1) %}", "{% set ns = namespace() %}{% set ns._x = 1 %}"):
        with pytest.raises(ChatTemplateError, match="underscore"):
            ChatTemplate(source).render([])
