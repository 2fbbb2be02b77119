"""Chat templates: a model's Jinja template (GGUF `tokenizer.chat_template`) rendered in jinja2's sandbox.

Templates come from model files, which are not trusted, so they render in an ImmutableSandboxedEnvironment
with the globals Hugging Face's renderer offers (`raise_exception`, `strftime_now`, a `tojson` that keeps
non-ASCII). A model without a template gets the built-in Gemma turn format below.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

log = logging.getLogger("hearth.models")

# Gemma's turn format. Gemma has no system role: system and developer text is put at the start of the next
# user turn (as Gemma 3's own template does); "assistant" is "model"; tool results come back as user turns.
GEMMA_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set ns = namespace(prefix='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] in ['system', 'developer'] -%}"
    "{%- set ns.prefix = ns.prefix + (message['content'] or '') | trim + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- if role == 'user' -%}{{- ns.prefix -}}{%- set ns.prefix = '' -%}{%- endif -%}"
    "{{- (message['content'] or '') | trim + '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.prefix -%}{{- '<start_of_turn>user\\n' + ns.prefix | trim + '<end_of_turn>\\n' -}}{%- endif -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

# Gemma 4's turn format (the structure of its published template without tool declarations): one system turn
# first (with <|think|> when thinking is asked for), turns as <|turn>role ... <turn|>, "assistant" is "model",
# tool results come back as user turns. Models whose file has no template (Ollama's Gemma 4 blobs) get it.
GEMMA4_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set loop_messages = messages -%}"
    "{%- set has_system = messages and messages[0]['role'] in ['system', 'developer'] -%}"
    "{%- if enable_thinking or has_system -%}"
    "{{- '<|turn>system\n' -}}"
    "{%- if enable_thinking -%}{{- '<|think|>\n' -}}{%- endif -%}"
    "{%- if has_system -%}{{- (messages[0]['content'] or '') | trim -}}"
    "{%- set loop_messages = messages[1:] -%}{%- endif -%}"
    "{{- '<turn|>\n' -}}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else "
    "('user' if message['role'] == 'tool' else message['role']) -%}"
    "{{- '<|turn>' + role + '\n' + (message['content'] or '') | trim + '<turn|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\n' -}}{%- endif -%}"
)


class ChatTemplateError(ValueError):
    """The messages do not fit the model's template (it raised, or rendering failed on them)."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(source: str) -> Any:
    # trim_blocks/lstrip_blocks match transformers' apply_chat_template, which GGUF templates are written for.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


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

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for these messages (each with `role` and string `content`)."""
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **extra,
            )
        except TemplateError as error:
            raise ChatTemplateError(f"the chat template rejected the messages: {error}") from error
        except (TypeError, KeyError, AttributeError, ValueError) as error:
            raise ChatTemplateError(f"the chat template could not render the messages: {error}") from error


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
