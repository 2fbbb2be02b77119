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
        ChatTemplate(source).render([{"role": "assistant", "content": "x"}])


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
        "{% for m in messages %}{% if m.content == 'skip' %}{% continue %}{% endif %}"
        "{% if m.content == 'stop' %}{% break %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
        "{{ dict(a=1, b=[2, 'é']) | tojson(separators=(',', ':'), sort_keys=true) }}"
        "{{ {'k': 1} | tojson(indent=2) }}{{ dict.fromkeys(['x'], 0) | tojson }}"
    )
    messages = [{"role": r, "content": c} for r, c in
                (("user", "skip"), ("user", "a"), ("assistant", "b"), ("user", "stop"), ("user", "c"))]
    assert ChatTemplate(source).render(messages) == '[a][b]{"a":1,"b":[2,"é"]}{\n  "k": 1\n}{"x": 0}'


def test_namespace_refuses_underscore_names() -> None:
    assert ChatTemplate("{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{{ ns.a }}").render([]) == "2"
    for source in ("{% set ns = namespace(_x=1) %}", "{% set ns = namespace() %}{% set ns._x = 1 %}"):
        with pytest.raises(ChatTemplateError, match="underscore"):
            ChatTemplate(source).render([])


# Gemma 2's published template: no system role (it raises on one), "assistant" is "model".
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_system_text_goes_to_the_next_user_turn_where_the_template_has_no_system_role() -> None:
    template = ChatTemplate(GEMMA2_TEMPLATE)
    assert not template.supports_system_role
    messages = [{"role": "system", "content": "Be terse."}, {"role": "developer", "content": "Use French."},
                {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Salut"},
                {"role": "user", "content": "Bye"}]
    assert template.render(messages) == (
        "<bos><start_of_turn>user\nBe terse.\nUse French.\nHi<end_of_turn>\n<start_of_turn>model\nSalut<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    # system text with no user turn after it becomes a user turn of its own
    assert template.render([{"role": "system", "content": "Be terse."}]) == (
        "<bos><start_of_turn>user\nBe terse.<end_of_turn>\n<start_of_turn>model\n")


def test_developer_is_the_system_role_unless_the_template_names_it() -> None:
    messages = [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    template = ChatTemplate(CHATML_TEMPLATE)
    assert template.supports_system_role
    assert template.render(messages).startswith("<|im_start|>system\nBe terse.<|im_end|>\n")
    naming = ChatTemplate(CHATML_TEMPLATE.replace("{% for", "{# developer #}{% for"))
    assert naming.render(messages).startswith("<|im_start|>developer\nBe terse.<|im_end|>\n")


def test_tools_calls_and_results_go_in_as_text_where_the_template_has_no_place_for_them() -> None:
    """Gemma 2's template knows no tools: the functions become system text (then the first user turn's), the
    assistant's calls its text in the model's call syntax, consecutive results one user turn."""
    from models.text.tool_calls import format_for

    template = ChatTemplate(GEMMA2_TEMPLATE)
    assert not (template.supports_tools or template.supports_tool_calls or template.supports_tool_results)
    syntax = format_for(None, "gemma2")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "18"},
                {"role": "tool", "tool_call_id": "c2", "content": "19"}]
    text = template.render(messages, tools=tools, tool_syntax=syntax)
    prompt = syntax.prompt(tools)
    assert '"name": "get_weather"' in prompt and syntax.render_call("NAME", {"ARGUMENT": "VALUE"}) in prompt
    assert text == (f"<bos><start_of_turn>user\n{prompt}\nWeather?<end_of_turn>\n<start_of_turn>model\n"
                    '{"name": "get_weather", "parameters": {"city": "Paris"}}<end_of_turn>\n<start_of_turn>user\n'
                    "```tool_output\n18\n```\n```tool_output\n19\n```<end_of_turn>\n<start_of_turn>model\n")
    # a system message keeps its place, the tools after its text
    with_system = template.render([{"role": "system", "content": "Be terse."}, messages[0]], tools=tools,
                                  tool_syntax=syntax)
    assert with_system.startswith(f"<bos><start_of_turn>user\nBe terse.\n\n{prompt}\nWeather?<end_of_turn>")
    # a template with a place for tools gets them as they are
    native = ChatTemplate("{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}")
    assert native.supports_tools and native.render(messages[:1], tools=tools, tool_syntax=syntax).startswith("[{")
