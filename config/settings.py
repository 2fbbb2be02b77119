"""Server settings: defaults, then an optional TOML file, then HEARTH_* environment variables, then the CLI.

The TOML file is `HEARTH_CONFIG` when set, else `config/hearth.toml` when it exists. Its keys mirror the
fields below (tables `[limits]`, `[ollama]`, `[aliases]`, `[[models]]`); see `config/hearth.example.toml`.
Unknown keys are errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

CONFIG_DIR = Path(__file__).resolve().parent
DEFAULT_CONFIG_FILE = CONFIG_DIR / "hearth.toml"
SHIPPED_MODEL = "gemma-3-270m"
MAX_STEPS_PER_SUBMIT = 16  # models/text/engine.py's: decode steps one submission can hold
# OpenAI model names that clients hard-code; they reach the default chat model.
OPENAI_ALIASES = ("gpt-4o-mini", "gpt-3.5-turbo")
SHIPPED_EMBEDDING_MODEL = "all-minilm-l6-v2"
# OpenAI embedding model names that clients hard-code; they reach the default embedding model.
OPENAI_EMBEDDING_ALIASES = ("text-embedding-3-small", "text-embedding-ada-002")
SHIPPED_SPEECH_MODEL = "kokoro"
OPENAI_SPEECH_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
SHIPPED_TRANSCRIPTION_MODEL = "whisper-tiny.en"
OPENAI_TRANSCRIPTION_ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")


class SettingsError(ValueError):
    """The configuration file or an environment variable holds an invalid value."""


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_keep_alive(value: str | float | int | None) -> float | None:
    """Seconds an idle model stays loaded, from an Ollama-style keep_alive; None means for ever.

    As Ollama: a number is seconds, a string is a duration such as "30s", "5m", "1h30m" or "-1"; any negative
    value keeps the model loaded for ever, and 0 unloads it as soon as its requests are done.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("keep_alive must be a number of seconds or a duration such as '5m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            sign, rest = -1.0 if text.startswith("-") else 1.0, text.lstrip("+-")
            parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", rest)
            if not parts or "".join(n + u for n, u in parts) != rest:
                raise ValueError(f"keep_alive {value!r} is not a duration such as '30s', '5m', '1h' or '-1'") from None
            seconds = sign * sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"keep_alive {value!r} is not a finite duration")
    return None if seconds < 0 else seconds


def _comma_list(value: Any) -> Any:
    """"a, b" from an environment variable as ("a", "b"); lists from TOML pass through."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _check_adapter_list(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Adapter indices or names, or 'all' alone (gpu.device.resolve_adapters reads them)."""
    if value is not None and "all" in value and len(value) > 1:
        raise ValueError("'all' takes no other adapters with it")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Frozen):
    """One model the server offers by name."""

    id: str = Field(min_length=1, description="the name clients send as `model`")
    source: str = Field(min_length=1, description="a GGUF path, or the shipped model's name")
    preload: bool = Field(True, description="load at startup (/ready waits for it); else on first request")
    context_length: int | None = Field(None, ge=16, description="tokens per sequence; None: the model's trained "
                                       "context, at most 8192. More than it was trained on runs (as llama.cpp's -c "
                                       "does), with a warning")
    kv_dtype: Literal["f16", "f32"] = "f16"
    int8_activations: bool | None = Field(
        None, description="GPU matmuls of prompts (and decode's output heads and large Q4_K matvecs; on a CPU "
        "adapter, decode's Q8_0 matvecs) on activations quantised to 8 bits, as llama.cpp does: faster prompts, "
        "llama.cpp's numerics rather than exact parity; None: the server's int8_activations")
    keep_alive: str | float | None = Field(
        None, description="idle time before unloading (Ollama style: '5m', seconds, -1 for ever); None: the "
        "server's keep_alive. Preloaded models never unload: /ready promises them")
    max_queue: int | None = Field(None, ge=0, description="requests waiting for this model; None: limits.max_queue")
    projector: str | None = Field(None, description="the model's image encoder (llama.cpp's mmproj GGUF); None: one "
                                  "found beside the model file, if any")
    adapters: tuple[str, ...] | None = Field(
        None, description="chat models: the GPUs it runs on, one replica each (server/replicas.py): adapter indices, "
        "names or 'all'; None: the server's `adapters`")

    _split_adapters = field_validator("adapters", mode="before")(_comma_list)
    _check_adapters = field_validator("adapters")(_check_adapter_list)

    @field_validator("keep_alive")
    @classmethod
    def _check_keep_alive(cls, value: str | float | None) -> str | float | None:
        parse_keep_alive(value)
        return value


class Limits(_Frozen):
    """Bounds that protect the server from one client; every one is a setting, none is hidden."""

    max_queue: int = Field(32, ge=0, description="requests waiting per model beyond the running batch; then 429")
    max_batch: int = Field(32, ge=1, le=64, description="sequences decoding together per model (continuous batching)")
    retry_after_s: int = Field(2, ge=1, description="seconds sent in Retry-After with a 429")
    max_body_bytes: int = Field(4 << 20, ge=1024, description="largest request body; then 413")
    max_upload_bytes: int = Field(25 << 20, ge=1024, description="largest multipart upload to the audio routes "
                                  "(transcriptions, translations): 25 MiB, as OpenAI; then 413")
    max_n: int = Field(8, ge=1, description="most choices per request")
    max_stop: int = Field(4, ge=1, description="most stop strings per request (OpenAI allows 4)")
    max_top_logprobs: int = Field(20, ge=0, le=20, description="most alternatives per token")
    max_tokens_default: int | None = Field(
        None, ge=1, description="chat max_tokens when the client sends none; None: up to the context end"
    )
    # 4: one model of each endpoint family (chat, embeddings, speech, transcription) fits without evictions.
    max_loaded_models: int = Field(4, ge=1, description="models held at once; idle on-demand ones unload first")
    max_speech_input: int = Field(4096, ge=1, description="most characters of /v1/audio/speech input, as OpenAI; "
                                  "then 400")
    # 600 s: a first request waits for its model to load, which took 3-5 minutes for Kokoro and Whisper on lavapipe
    # with the CPU shared (a GPU loads in seconds).
    request_timeout_s: float = Field(
        600.0, ge=0, description="seconds a request may take (a first request's model load included): a "
        "non-streamed answer then gets a 504, a stream an error event; either way its work is cancelled. 0: no limit")
    max_choices: int = Field(32, ge=1, description="most sequences one request asks for (prompts x n in "
                             "/v1/completions, n in chat); then 400")
    # 300,000: OpenAI's limit on the tokens of all inputs of one embeddings request together.
    max_embedding_tokens: int = Field(300_000, ge=1, description="most tokens of all inputs of one /v1/embeddings "
                                      "request together; then 400")
    max_rerank_documents: int = Field(1000, ge=1, description="most documents one /v1/rerank request may rank; "
                                      "then 400")
    max_audio_seconds: float = Field(1800.0, gt=0, description="longest decoded audio an upload may hold, checked "
                                     "while decoding; then 413")
    max_speech_phonemes: int = Field(6000, ge=1, description="most phonemes one /v1/audio/speech input may expand "
                                     "to (digits and symbols expand into many); then 400")
    max_preparing: int = Field(4, ge=1, description="requests decoding audio or tokenising input at once, before "
                               "their model's queue; more wait their turn")
    shutdown_timeout_s: float = Field(10.0, ge=0, description="on SIGTERM, seconds running work may take to end "
                                      "before it is cancelled and the server exits")
    responses_store_size: int = Field(1000, ge=0, description="responses kept in memory for /v1/responses' "
                                      "previous_response_id, least recently used dropped first; 0 keeps none")
    max_images: int = Field(8, ge=0, description="most images one chat request may carry (all messages together); "
                            "then 400")
    # 33,554,432 pixels: an 8K photo (7680 x 4320) and more; Pillow's decompression-bomb guard is set from it.
    max_image_pixels: int = Field(1 << 25, ge=1, description="most pixels (width x height) of one image, read from "
                                  "its header before it is decoded; then 413")
    max_image_bytes: int = Field(10 << 20, ge=1, description="largest encoded image (after base64) of one content "
                                 "part; then 413. Base64 images also count against max_body_bytes")
    allow_image_urls: bool = Field(False, description="fetch http(s) image URLs in chat content parts; off: only "
                                   "data: URLs are taken, others are a 400")
    max_audio_clips: int = Field(4, ge=0, description="most input_audio parts one chat request may carry (all "
                                 "messages together); then 400")
    max_input_audio_bytes: int = Field(10 << 20, ge=1, description="largest encoded clip (after base64) of one "
                                       "input_audio part; then 413. Base64 audio also counts against max_body_bytes")
    max_input_audio_seconds: float = Field(30.0, gt=0, description="longest decoded clip of one input_audio part, "
                                           "checked while decoding; then 413 (a model's encoder may take less: "
                                           "Gemma 4's takes 30 s)")


class OllamaConfig(_Frozen):
    """Where to find the user's Ollama store; `OLLAMA_MODELS` is honoured as Ollama does."""

    enabled: bool = True
    models_dir: Path | None = Field(None, description="None: $OLLAMA_MODELS or ~/.ollama/models")


class ModelGroup(_Frozen):
    """The models of one endpoint family (embeddings, speech, transcription; chat's come from the top-level
    `models`, `aliases`, `default_model` and `model_loader`): each is loaded on its first request unless
    `preload` is set; aliases with an empty target reach the family's default."""

    models: tuple[ModelConfig, ...] = ()
    default: str | None = None
    aliases: dict[str, str] = Field(default_factory=dict)
    loader: str = Field(description="module:function that loads one of these models")

    @model_validator(mode="after")
    def _check_names(self) -> ModelGroup:
        ids = [m.id for m in self.models]
        if len(set(ids)) != len(ids):
            raise ValueError(f"model ids repeat: {ids}")
        if self.default is not None and self.default not in ids:
            raise ValueError(f"default {self.default!r} is not one of the models {ids}")
        for alias, target in self.aliases.items():
            if alias in ids:
                raise ValueError(f"alias {alias!r} shadows a model of the same name")
            if target and target not in ids:
                raise ValueError(f"alias {alias!r} points at {target!r}, which is not one of the models {ids}")
        return self

    def alias_target(self, alias: str) -> str | None:
        """The model id an alias names (None: not an alias, or no default to reach)."""
        if alias not in self.aliases:
            return None
        return self.aliases[alias] or self.default


class Settings(_Frozen):
    """Everything the server reads at startup."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = Field(None, description="when set, /v1 requests need `Authorization: Bearer <key>`; "
                                "several keys separated by commas are all accepted")
    cors_origins: tuple[str, ...] = Field((), description="origins browsers may call from ('*' for any); "
                                          "comma-separated in HEARTH_CORS_ORIGINS; empty: no CORS headers")
    metrics_need_key: bool = Field(False, description="with API keys set, /metrics needs one too (else it is "
                                   "open like /health, for Prometheus on a private network)")
    int8_activations: bool = Field(False, description="chat models' GPU matmuls of prompts on activations quantised "
                                   "to 8 bits (as llama.cpp's): faster prompts on a GPU (on a CPU adapter, decode's "
                                   "Q8_0 matvecs), llama.cpp's numerics rather than exact parity; a model's own "
                                   "int8_activations wins")
    prefix_caching: bool = Field(True, description="chat models reuse the KV cache of a prompt's leading pages that "
                                 "an earlier request had (a system prompt, a chat's earlier turns) rather than "
                                 "prefill them again; the same outputs either way")
    compile_ahead: bool = Field(True, description="chat models compile every pipeline a request can hit (each "
                                "prompt chunk size, decode batch size and sampler) before /ready says ready, and run "
                                "them once on a GPU; off: only a short prompt's and one decode step's, the rest on "
                                "the requests that first need them")
    steps_per_submit: int | None = Field(None, description="decode steps of a chat batch per GPU submission (1 to "
                                         "16; by default 8 on a GPU, 1 on a software adapter): more spread the "
                                         "host's cost of a submission over more tokens, fewer pace a stream's tokens "
                                         "evenly rather than in bursts of that many")
    jump_forward: bool = Field(True, description="constrained decoding feeds the tokens a grammar forces (a JSON "
                               "schema's keys and punctuation) as one prompt chunk rather than a decode step each; "
                               "the same outputs either way")
    keep_alive: str | float = Field("5m", description="how long a model loaded on demand stays loaded while "
                                    "idle (Ollama's keep_alive: '5m', seconds, -1 for ever); requests may set it")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = Field("text", description="log lines as text or one JSON object each; "
                                                "both carry the request id")
    default_model: str = SHIPPED_MODEL
    models: tuple[ModelConfig, ...] = (ModelConfig(id=SHIPPED_MODEL, source=SHIPPED_MODEL),)
    aliases: dict[str, str] = Field(default_factory=lambda: {name: "" for name in OPENAI_ALIASES})
    # The other endpoint families, each with its models, default, aliases and loader.
    embeddings: ModelGroup = ModelGroup(
        models=(ModelConfig(id=SHIPPED_EMBEDDING_MODEL, source=SHIPPED_EMBEDDING_MODEL, preload=False),),
        default=SHIPPED_EMBEDDING_MODEL, aliases={name: "" for name in OPENAI_EMBEDDING_ALIASES},
        loader="server.embedding_worker:load_on_own_device")
    speech: ModelGroup = ModelGroup(
        models=(ModelConfig(id=SHIPPED_SPEECH_MODEL, source=SHIPPED_SPEECH_MODEL, preload=False),),
        default=SHIPPED_SPEECH_MODEL, aliases={name: "" for name in OPENAI_SPEECH_ALIASES},
        loader="server.speech_worker:load_on_own_device")
    transcription: ModelGroup = ModelGroup(
        models=(ModelConfig(id=SHIPPED_TRANSCRIPTION_MODEL, source=SHIPPED_TRANSCRIPTION_MODEL, preload=False),),
        default=SHIPPED_TRANSCRIPTION_MODEL, aliases={name: "" for name in OPENAI_TRANSCRIPTION_ALIASES},
        loader="server.transcription_worker:load_on_own_device")
    # Cross-encoders for /v1/rerank: none is shipped; `[[rerank.models]]` names a directory or GGUF file.
    rerank: ModelGroup = ModelGroup(loader="server.rerank_worker:load_on_own_device")
    limits: Limits = Limits()
    ollama: OllamaConfig = OllamaConfig()
    speech_voices: tuple[str, ...] = Field((), description="extra Kokoro voicepacks for every speech model: files "
                                           "(.pt, .npz, voices-v1.0.bin) or folders of them; ids from the file names "
                                           "(.pt) or the archive's keys")
    adapters: tuple[str, ...] = Field((), description="the GPUs each chat model runs on, one replica per adapter "
                                      "(indices of `hearth adapters`, names, or 'all'; an index may repeat); "
                                      "comma-separated in HEARTH_ADAPTERS; empty: one worker on HEARTH_ADAPTER's")
    model_loader: str = Field(
        "server.chat_worker:load_on_own_device",
        description="module:function that loads a model; tests point it at a fake",
    )

    _split_origins = field_validator("cors_origins", mode="before")(_comma_list)
    _split_voices = field_validator("speech_voices", mode="before")(_comma_list)
    _split_adapters = field_validator("adapters", mode="before")(_comma_list)
    _check_adapters = field_validator("adapters")(_check_adapter_list)

    @field_validator("keep_alive")
    @classmethod
    def _check_keep_alive(cls, value: str | float) -> str | float:
        parse_keep_alive(value)
        return value

    @field_validator("steps_per_submit")
    @classmethod
    def _check_steps_per_submit(cls, value: int | None) -> int | None:
        # the engine records at most this many steps a submission
        if value is not None and not 1 <= value <= MAX_STEPS_PER_SUBMIT:
            raise ValueError(f"HEARTH_STEPS_PER_SUBMIT (steps_per_submit) must be 1 to {MAX_STEPS_PER_SUBMIT} decode "
                             f"steps a submission, not {value}")
        return value

    def api_keys(self) -> tuple[str, ...]:
        """The accepted API keys (api_key split at commas); empty when the server is open."""
        return tuple(key.strip() for key in (self.api_key or "").split(",") if key.strip())


    @model_validator(mode="after")
    def _check_names(self) -> Settings:
        ids = [m.id for m in self.models]
        if len(set(ids)) != len(ids):
            raise ValueError(f"model ids repeat: {ids}")
        if self.default_model not in ids:
            raise ValueError(f"default_model {self.default_model!r} is not one of the models {ids}")
        for alias, target in self.aliases.items():
            if alias in ids:
                raise ValueError(f"alias {alias!r} shadows a model of the same name")
            if target and target not in ids:
                raise ValueError(f"alias {alias!r} points at {target!r}, which is not one of the models {ids}")
        return self

    @model_validator(mode="after")
    def _check_groups_apart(self) -> Settings:
        """No name may reach two models: a group's ids and aliases shadow nothing in another group."""
        seen: dict[str, str] = {}
        for kind, group in self.groups().items():
            family = "chat" if kind == "text" else kind
            replicated = [m.id for m in group.models if m.adapters is not None]
            if kind != "text" and replicated:
                raise ValueError(f"{family} models {replicated} name adapters: replicas are for chat models only")
            for name in [m.id for m in group.models] + list(group.aliases):
                if name in seen:
                    raise ValueError(f"{family} model or alias {name!r} is also a {seen[name]} model or alias")
                seen[name] = family
        return self

    def groups(self) -> dict[str, ModelGroup]:
        """Every endpoint family by the model kind it serves, chat ("text") first."""
        # Chat's fields were checked above by the same rules as a group's, so its group is built unchecked.
        chat = ModelGroup.model_construct(models=self.models, default=self.default_model, aliases=self.aliases,
                                          loader=self.model_loader)
        return {"text": chat, "embedding": self.embeddings, "speech": self.speech,
                "transcription": self.transcription, "rerank": self.rerank}

    def alias_target(self, alias: str) -> str | None:
        """The model id an alias names; an empty target means the default model."""
        if alias not in self.aliases:
            return None
        return self.aliases[alias] or self.default_model

    def model_config_for(self, model_id: str) -> ModelConfig | None:
        return next((m for m in self.models if m.id == model_id), None)


# Environment variable -> dotted settings key. Values are parsed by pydantic (so "8001" becomes 8001).
_ENV_KEYS = {
    "HEARTH_HOST": "host",
    "HEARTH_PORT": "port",
    "HEARTH_API_KEY": "api_key",
    "HEARTH_LOG_LEVEL": "log_level",
    "HEARTH_LOG_FORMAT": "log_format",
    "HEARTH_DEFAULT_MODEL": "default_model",
    "HEARTH_MODEL_LOADER": "model_loader",
    "HEARTH_MAX_QUEUE": "limits.max_queue",
    "HEARTH_MAX_BATCH": "limits.max_batch",
    "HEARTH_RETRY_AFTER": "limits.retry_after_s",
    "HEARTH_MAX_BODY_BYTES": "limits.max_body_bytes",
    "HEARTH_MAX_UPLOAD_BYTES": "limits.max_upload_bytes",
    "HEARTH_MAX_N": "limits.max_n",
    "HEARTH_MAX_TOKENS_DEFAULT": "limits.max_tokens_default",
    "HEARTH_MAX_LOADED_MODELS": "limits.max_loaded_models",
    "HEARTH_OLLAMA": "ollama.enabled",
    "HEARTH_CORS_ORIGINS": "cors_origins",
    "HEARTH_METRICS_NEED_KEY": "metrics_need_key",
    "HEARTH_KEEP_ALIVE": "keep_alive",
    "HEARTH_REQUEST_TIMEOUT": "limits.request_timeout_s",
    "HEARTH_VOICES": "speech_voices",
    "HEARTH_MAX_SPEECH_INPUT": "limits.max_speech_input",
    "HEARTH_MAX_CHOICES": "limits.max_choices",
    "HEARTH_MAX_EMBEDDING_TOKENS": "limits.max_embedding_tokens",
    "HEARTH_MAX_AUDIO_SECONDS": "limits.max_audio_seconds",
    "HEARTH_MAX_RERANK_DOCUMENTS": "limits.max_rerank_documents",
    "HEARTH_MAX_SPEECH_PHONEMES": "limits.max_speech_phonemes",
    "HEARTH_MAX_PREPARING": "limits.max_preparing",
    "HEARTH_MAX_IMAGES": "limits.max_images",
    "HEARTH_MAX_IMAGE_PIXELS": "limits.max_image_pixels",
    "HEARTH_MAX_IMAGE_BYTES": "limits.max_image_bytes",
    "HEARTH_ALLOW_IMAGE_URLS": "limits.allow_image_urls",
    "HEARTH_MAX_AUDIO_CLIPS": "limits.max_audio_clips",
    "HEARTH_MAX_INPUT_AUDIO_BYTES": "limits.max_input_audio_bytes",
    "HEARTH_MAX_INPUT_AUDIO_SECONDS": "limits.max_input_audio_seconds",
    "HEARTH_SHUTDOWN_TIMEOUT": "limits.shutdown_timeout_s",
    "HEARTH_RESPONSES_STORE_SIZE": "limits.responses_store_size",
    "HEARTH_INT8_ACTIVATIONS": "int8_activations",
    "HEARTH_PREFIX_CACHING": "prefix_caching",
    "HEARTH_COMPILE_AHEAD": "compile_ahead",
    "HEARTH_STEPS_PER_SUBMIT": "steps_per_submit",
    "HEARTH_JUMP_FORWARD": "jump_forward",
    "HEARTH_ADAPTERS": "adapters",
}


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[leaf] = value


def _env_models(value: str) -> list[dict[str, Any]]:
    """HEARTH_MODELS="id=source,id2=source2" (a bare source uses its file stem as the id)."""
    models = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        model_id, sep, source = item.partition("=")
        if not sep:
            source, model_id = item, Path(item).stem
        models.append({"id": model_id.strip(), "source": source.strip()})
    return models


def config_file(env: Mapping[str, str]) -> Path | None:
    """The TOML file to read: HEARTH_CONFIG if set (it must exist), else config/hearth.toml if present."""
    named = env.get("HEARTH_CONFIG")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SettingsError(f"HEARTH_CONFIG={named!r} is not a file")
        return path
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def load_settings(
    path: Path | None = None, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Settings from defaults < TOML file < environment < overrides (dotted keys, e.g. from the CLI)."""
    env = os.environ if env is None else env
    path = path or config_file(env)
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise SettingsError(f"reading {path}: {error}") from error
    for name, key in _ENV_KEYS.items():
        if env.get(name, "") != "":
            _set_dotted(data, key, env[name])
    if env.get("HEARTH_MODELS"):
        data["models"] = _env_models(env["HEARTH_MODELS"])
    if env.get("OLLAMA_MODELS") and "models_dir" not in data.get("ollama", {}):
        _set_dotted(data, "ollama.models_dir", env["OLLAMA_MODELS"])
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, key, value)
    # One model and no default named: that model is the default.
    if "models" in data and "default_model" not in data and data["models"]:
        data["default_model"] = data["models"][0].get("id")
    # A group's table changes only the keys it names (a [speech] table with models keeps the OpenAI aliases and
    # the loader); models without a default: the first is the default.
    for group in ("embeddings", "speech", "transcription", "rerank"):
        table = data.get(group)
        if isinstance(table, dict):
            if "models" in table and "default" not in table:
                table["default"] = table["models"][0].get("id") if table["models"] else None
            defaults = Settings.model_fields[group].default.model_dump(exclude={"models"} & set(table))
            data[group] = {**defaults, **table}
    try:
        return Settings.model_validate(data)
    except ValidationError as error:
        where = f" in {path}" if path else ""
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in error.errors())
        raise SettingsError(f"invalid settings{where}: {problems}") from error
