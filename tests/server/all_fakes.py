"""An app with every endpoint family on a fake model (chat, embeddings, speech, transcription): the whole server
code, in seconds. The hostile-input and soak tests run against it.
"""

from __future__ import annotations

from typing import Any

from config.settings import Settings, load_settings
from server.app import create_app
from tests.server.fake_model import fake_loader

FAKE_LOADERS = {
    "embeddings.loader": "tests.server.fake_embedding:load",
    "speech.loader": "tests.server.fake_kokoro:load",
    "transcription.loader": "tests.server.fake_whisper:load_fake_whisper",
}


def fake_settings(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings whose families all load fakes; the Ollama store is off unless env turns it on."""
    return load_settings(path=None, env={"HEARTH_OLLAMA": "false", **(env or {})},
                         overrides={**FAKE_LOADERS, **overrides})


def fake_app(env: dict[str, str] | None = None, step_s: float = 0.0, **overrides: Any) -> Any:
    """The production app on fakes (warm-up skipped: the fakes have nothing to compile)."""
    return create_app(fake_settings(env, **overrides), loader=fake_loader(step_s=step_s), warm_up=False)


def load_soak_chat(source: str, *, progress: Any = None, **_: Any) -> Any:
    """`HEARTH_MODEL_LOADER` for the soak's server process: the fake chat model at 5 ms a token, 8 in a batch, so
    streams last long enough to be cancelled midway."""
    from tests.server.fake_model import FakeModel

    if progress is not None:
        progress(1, 1)
    return FakeModel(source, step_s=0.005, context_length=512, max_batch=8)


def fake_config_toml(exclude: set[str] | frozenset[str] = frozenset()) -> str:
    """A HEARTH_CONFIG file putting the embeddings, speech and transcription families on fakes, but those in
    exclude (for a server started as `python -m server`, where overrides cannot be passed)."""
    tables = [key.split(".")[0] for key in FAKE_LOADERS]
    return "".join(f'[{table}]\nloader = "{FAKE_LOADERS[table + ".loader"]}"\n\n' for table in tables
                   if table not in exclude)
