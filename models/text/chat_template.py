"""Chat templates: a model's Jinja template (GGUF `tokenizer.chat_template`) rendered in jinja2's sandbox.

Templates come from model files, which are not trusted, so they render in an ImmutableSandboxedEnvironment
set up as transformers' renderer (render_jinja_template) sets up its own, which is what the templates are written
for: trim_blocks and lstrip_blocks, the loop controls `{% break %}` and `{% continue %}`, the `{% generation %}`
block (transformers marks the assistant's text with it; here it only renders its body), `raise_exception`,
`strftime_now`, a `tojson` that keeps non-ASCII and takes indent, separators and sort_keys, and `dict` and
`namespace` that refuse underscore names. tests/server/test_chat_template_families.py checks the model families'
own templates against transformers' renderings. A model without a template gets the built-in Gemma turn format below.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from jinja2 import TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

log = logging.getLogger("hearth.models")

# Gemma 3's function-calling prompt (Google's documented JSON variant, with a line for parallel calls): the built-in
# format puts it, with the functions as JSON, at the start of the first user turn; models.text.tool_calls "gemma3"
# constrains and parses the reply.
GEMMA3_TOOL_PREAMBLE = (
    "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in the format "
    "of\n"
    '{"name": function name, "parameters": dictionary of argument name and its value}\n'
    "To call several functions, write one such object per line.\n\n"
    "You SHOULD NOT include any other text in the response if you call a function\n"
)

# Gemma's turn format. Gemma has no system role: system and developer text (and the tools, in Gemma 3's
# function-calling prompt) is put at the start of the next user turn (as Gemma 3's own template does); "assistant"
# is "model", its tool calls are the JSON objects of that prompt, one per line; tool results come back in a user
# turn, each in a ```tool_output block (one turn for consecutive results).
GEMMA_TEMPLATE = (
    # content: a string, or (a message with images) text and image items, written as Gemma 3's own template does
    "{%- macro content(c) -%}"
    "{%- if c is string or not c -%}{{- (c or '') | trim -}}"
    "{%- else -%}{%- for item in c -%}"
    "{%- if item['type'] == 'image' -%}{{- '<start_of_image>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] | trim -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{{- bos_token -}}"
    "{%- set ns = namespace(prefix='', tools='') -%}"
    "{%- if tools -%}"
    "{%- set ns.tools = " + repr(GEMMA3_TOOL_PREAMBLE)
    + " + (tools | map(attribute='function') | list | tojson(indent=2)) + '\\n\\n' -%}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] in ['system', 'developer'] -%}"
    "{%- set ns.prefix = ns.prefix + content(message['content']) + '\\n\\n' -%}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if not (loop.previtem and loop.previtem['role'] == 'tool') -%}{{- '<start_of_turn>user\\n' -}}{%- endif -%}"
    "{{- '```tool_output\\n' + (message['content'] or '') | trim + '\\n```' -}}"
    "{{- '\\n' if loop.nextitem and loop.nextitem['role'] == 'tool' else '<end_of_turn>\\n' -}}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- if role == 'user' -%}{{- ns.prefix + ns.tools -}}{%- set ns.prefix = '' -%}{%- set ns.tools = '' -%}"
    "{%- endif -%}"
    "{{- content(message['content']) -}}"
    "{%- for call in message['tool_calls'] or [] -%}"
    "{{- '\\n' if message['content'] or not loop.first -}}"
    "{%- set args = call['function']['arguments'] -%}"
    "{{- '{\"name\": ' + call['function']['name'] | tojson + ', \"parameters\": ' -}}"
    "{{- (args if args is string else args | tojson) + '}' -}}"
    "{%- endfor -%}"
    "{{- '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.prefix or ns.tools -%}"
    "{{- '<start_of_turn>user\\n' + (ns.prefix + ns.tools) | trim + '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

# A value in Gemma 4's syntax (keys bare, strings between <|"|>); for a schema (declarations) keys are sorted and
# types upper-case, as Google's template writes them; arguments keep their order.
_GEMMA4_VALUE = (
    "{%- macro gemma_value(v, schema=false) -%}"
    "{%- if v is string -%}{{- '<|\"|>' + v + '<|\"|>' -}}"
    "{%- elif v is boolean -%}{{- 'true' if v else 'false' -}}"
    "{%- elif v is none -%}{{- 'null' -}}"
    "{%- elif v is mapping -%}{{- '{' -}}"
    "{%- for key, item in (v | dictsort if schema else v.items()) -%}"
    "{{- (',' if not loop.first else '') + key + ':' -}}"
    "{%- if schema and key == 'type' -%}"
    "{{- gemma_value(item | upper if item is string else item | map('upper') | list) -}}"
    "{%- else -%}{{- gemma_value(item, schema) -}}{%- endif -%}"
    "{%- endfor -%}{{- '}' -}}"
    "{%- elif v is iterable -%}{{- '[' -}}"
    "{%- for item in v -%}{{- (',' if not loop.first else '') + gemma_value(item, schema) -}}{%- endfor -%}"
    "{{- ']' -}}"
    "{%- else -%}{{- v -}}{%- endif -%}"
    "{%- endmacro -%}"
)

# Gemma 4's turn format (the structure of its published template): one system turn first (with <|think|> when
# thinking is asked for, then the tool declarations <|tool>declaration:NAME{...}<tool|>), turns as <|turn>role ...
# <turn|>, "assistant" is "model". A model turn's calls are <|tool_call>call:NAME{...}<tool_call|>; the results go
# in the same turn as <|tool_response>response:NAME{value:<|"|>...<|"|>}<tool_response|>, and the model goes on in
# that turn (no new one opens after a result). Models whose file has no template (Ollama's Gemma 4 blobs) get it.
GEMMA4_TEMPLATE = _GEMMA4_VALUE + (
    # content: a string, or text, image and audio items, the media as the published template writes them (inline)
    "{%- macro content(c) -%}"
    "{%- if c is string or not c -%}{{- (c or '') | trim -}}"
    "{%- else -%}{%- for item in c -%}"
    "{%- if item['type'] == 'image' -%}{{- '<|image|>' -}}"
    "{%- elif item['type'] == 'audio' -%}{{- '<|audio|>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] | trim -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{{- bos_token -}}"
    "{%- set loop_messages = messages -%}"
    "{%- set has_system = messages and messages[0]['role'] in ['system', 'developer'] -%}"
    "{%- if enable_thinking or has_system or tools -%}"
    "{{- '<|turn>system\n' -}}"
    "{%- if enable_thinking -%}{{- '<|think|>\n' -}}{%- endif -%}"
    "{%- if has_system -%}{{- (messages[0]['content'] or '') | trim -}}"
    "{%- set loop_messages = messages[1:] -%}{%- endif -%}"
    "{%- for tool in tools or [] -%}"
    "{%- set fn = tool['function'] -%}"
    "{{- '<|tool>declaration:' + fn['name'] + '{' -}}"
    "{%- if fn['description'] -%}{{- 'description:' + gemma_value(fn['description']) -}}{%- endif -%}"
    "{%- if fn['parameters'] -%}"
    "{{- (',' if fn['description'] else '') + 'parameters:' + gemma_value(fn['parameters'], true) -}}"
    "{%- endif -%}"
    "{{- '}<tool|>' -}}"
    "{%- endfor -%}"
    "{{- '<turn|>\n' -}}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{%- set prev = loop.previtem -%}"
    "{%- set in_model_turn = prev and (prev['role'] == 'tool' or (prev['role'] == 'assistant' and prev['tool_calls']"
    " and role == 'tool')) -%}"
    "{%- set next = loop.nextitem['role'] if loop.nextitem else '' -%}"
    "{%- if role == 'tool' -%}"
    "{%- set found = namespace(name=message['name'] or 'unknown') -%}"
    "{%- for earlier in loop_messages if earlier['role'] == 'assistant' -%}"
    "{%- for call in earlier['tool_calls'] or [] -%}"
    "{%- if call['id'] and call['id'] == message['tool_call_id'] -%}{%- set found.name = call['function']['name'] -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endfor -%}"
    "{%- if not in_model_turn -%}{{- '<|turn>model\n' -}}{%- endif -%}"
    "{{- '<|tool_response>response:' + found.name + '{value:' + gemma_value(message['content'] or '') -}}"
    "{{- '}<tool_response|>' -}}"
    "{%- if next not in ['tool', 'assistant', ''] -%}{{- '<turn|>\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{%- if not (role == 'model' and in_model_turn) -%}{{- '<|turn>' + role + '\n' -}}{%- endif -%}"
    "{{- content(message['content']) -}}"
    "{%- for call in message['tool_calls'] or [] -%}"
    "{%- set args = call['function']['arguments'] -%}"
    "{{- '<|tool_call>call:' + call['function']['name'] -}}"
    "{{- ('{' + args + '}' if args is string else gemma_value(args)) + '<tool_call|>' -}}"
    "{%- endfor -%}"
    "{%- if not (message['tool_calls'] and next == 'tool') -%}{{- '<turn|>\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt and not (loop_messages and loop_messages[-1]['role'] == 'tool') -%}"
    "{{- '<|turn>model\n' -}}"
    "{%- endif -%}"
)


class ChatTemplateError(ValueError):
    """The messages do not fit the model's template (it raised, or rendering failed on them)."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja2's own tojson escapes HTML characters and takes no options; this is transformers' (same argument order).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _Dict:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without handing them the type itself (as transformers)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _Namespace(Namespace):
    """jinja2's namespace() without underscore names, which could reach Python internals (as transformers does)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 -- jinja2's signature trick: `self` may be a key
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a chat template may not set the underscore name {name!r} on a namespace")


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}`: transformers' marker of the assistant's text; renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return caller()


@lru_cache(maxsize=16)
def _compile(source: str) -> Any:
    # trim_blocks/lstrip_blocks match transformers' apply_chat_template, which GGUF templates are written for.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


_PROBE = "\u2063probe\u2063"  # text no conversation holds
_PROBE_NAME = "probe_function_4c7a"


class ToolSyntax(Protocol):
    """How a model writes tool calls (models/text/tool_calls' formats), for templates without tools."""

    def prompt(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """The functions and how to call them, as a system message."""
        ...

    def render_calls(self, calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> str:
        """Calls as the model writes them."""
        ...

    def render_result(self, content: str) -> str:
        """A tool's result as the user turn that gives it back."""
        ...


class ChatTemplate:
    """A compiled chat template with the special tokens it refers to."""

    def __init__(self, source: str | None, bos_token: str = "<bos>", eos_token: str = "<eos>") -> None:
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.source = GEMMA_TEMPLATE
        self.builtin = True
        if source:
            try:
                _compile(source)
                self.source, self.builtin = source, False
            except TemplateError as error:
                # A broken template in a model file is not the client's fault: serve with the built-in one.
                log.warning("the model's chat template does not compile (%s); using the built-in Gemma format",
                            error)
        self._template = _compile(self.source)
        # What the template has a place for, found by rendering probes (as llama.cpp's template polyfills do);
        # render() moves what it lacks into places it has.
        self.handles_developer = "developer" in self.source
        user = {"role": "user", "content": "hello"}
        self.supports_system_role = self._renders(_PROBE, [{"role": "system", "content": _PROBE}, user])
        self.supports_tools = self._renders(_PROBE_NAME, [user], tools=[
            {"type": "function", "function": {"name": _PROBE_NAME, "parameters": {"type": "object"}}}])
        call = {"id": "probe0123", "type": "function", "function": {"name": _PROBE_NAME, "arguments": {}}}
        self.supports_tool_calls = self._renders(_PROBE_NAME, [user, {"role": "assistant", "content": "",
                                                                       "tool_calls": [call]}])
        self.supports_tool_results = self._renders(_PROBE, [
            user, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "probe0123", "name": _PROBE_NAME, "content": _PROBE}])

    def _renders(self, needle: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                 ) -> bool:
        """Whether rendering these messages writes `needle` (and does not fail)."""
        try:
            text = self._template.render(messages=messages, tools=tools, documents=None, add_generation_prompt=True,
                                         bos_token=self.bos_token, eos_token=self.eos_token)
        except Exception:  # noqa: BLE001 - any failure of a probe means "no"; real renders report their errors
            return False
        return needle in text

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_syntax: ToolSyntax | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for these messages (each with `role` and `content`: a string, or for a message with
        images a list of {"type": "text", "text"} and {"type": "image"} items; assistant messages may
        have OpenAI `tool_calls`, whose JSON `arguments` templates get as objects, as transformers' users pass
        them; `tool` messages a `tool_call_id`). tool_syntax: how the model writes calls, for a template that has
        no place for tools, calls or their results (Gemma 1 and 2, Phi-3): they then go in as text."""
        if tool_syntax is not None:
            messages, tools = self._with_tool_text(messages, tools, tool_syntax)
        messages = _with_system_role(messages, self.supports_system_role, self.handles_developer)
        try:
            return self._template.render(
                messages=[_for_template(m) for m in messages],
                tools=list(tools) if tools else None,
                documents=None,  # transformers always passes it; some templates test `documents is not none`
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except TemplateError as error:
            raise ChatTemplateError(f"the chat template rejected the messages: {error}") from error
        except (TypeError, KeyError, AttributeError, ValueError) as error:
            raise ChatTemplateError(f"the chat template could not render the messages: {error}") from error

    def _with_tool_text(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                        syntax: ToolSyntax) -> tuple[list[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None]:
        """Tools as a system message, calls as the assistant's text, results as user turns, where the template
        lacks a place for them."""
        out: list[Mapping[str, Any]] = []
        if tools and not self.supports_tools:
            prompt = syntax.prompt(tools)
            if messages and messages[0].get("role") in ("system", "developer"):  # one system message, tools last
                first, *rest = messages
                messages = [{**first, "content": f"{_text_of(first.get('content'))}\n\n{prompt}"}, *rest]
            else:
                out.append({"role": "system", "content": prompt})
            tools = None
        for message in messages:
            calls = message.get("tool_calls")
            if calls and not self.supports_tool_calls:
                text = syntax.render_calls([(c["function"]["name"], c["function"]["arguments"]) for c in calls])
                content = _text_of(message.get("content"))
                message = {"role": message["role"], "content": f"{content}\n{text}" if content else text}
            elif message.get("role") == "tool" and not self.supports_tool_results:
                result = syntax.render_result(_text_of(message.get("content")))
                if out and out[-1].get("tool_results"):  # consecutive results share one user turn
                    result = out.pop()["content"] + "\n" + result
                message = {"role": "user", "content": result, "tool_results": True}
            out.append(message)
        return [{k: v for k, v in m.items() if k != "tool_results"} for m in out], tools


def _with_system_role(messages: Sequence[Mapping[str, Any]], supported: bool, developer: bool,
                      ) -> Sequence[Mapping[str, Any]]:
    """Messages as the template can take them. OpenAI's `developer` role is the system role for a template that
    does not name it. For a template without a system role, system text goes at the start of the next user turn
    (joined by a newline, as llama.cpp's template polyfill does), or in a user turn of its own when no user turn
    follows."""
    if not developer:
        messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
    if supported or not any(m.get("role") == "system" for m in messages):
        return messages
    folded: list[Mapping[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        if message.get("role") == "system":
            pending.append(_text_of(message.get("content")))
            continue
        if pending and message.get("role") == "user":
            content = message.get("content")
            system = "\n".join(pending)
            if isinstance(content, list):
                content = [{"type": "text", "text": system + "\n"}, *content]
            else:
                content = system + ("\n" + content if content else "")
            message = {**message, "content": content}
            pending = []
        elif pending:
            folded.append({"role": "user", "content": "\n".join(pending)})
            pending = []
        folded.append(message)
    if pending:
        folded.append({"role": "user", "content": "\n".join(pending)})
    return folded


def _text_of(content: Any) -> str:
    """A message's content as text: a string as it is, text parts joined."""
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, Mapping))
    return content or ""


def _for_template(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message for a template: tool calls' arguments as objects where they are JSON objects (templates write
    them with tojson or in their own syntax; a JSON text would come out quoted)."""
    message = dict(message)
    calls = message.get("tool_calls")
    if not calls:
        return message
    converted = []
    for call in calls:
        call = dict(call)
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                function["arguments"] = parsed
        call["function"] = function
        converted.append(call)
    message["tool_calls"] = converted
    return message


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    template: str | None,
    *,
    bos_token: str = "<bos>",
    eos_token: str = "<eos>",
    add_generation_prompt: bool = True,
) -> str:
    """Render messages with a template source (None: the built-in Gemma format)."""
    return ChatTemplate(template, bos_token, eos_token).render(messages, add_generation_prompt=add_generation_prompt)
