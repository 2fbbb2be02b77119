"""Settings: defaults, the TOML file, the environment and CLI overrides, in that order of precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import SHIPPED_MODEL, SettingsError, load_settings


def test_defaults_serve_the_shipped_model_on_loopback() -> None:
    settings = load_settings(env={})
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert [m.id for m in settings.models] == [SHIPPED_MODEL]
    assert settings.default_model == SHIPPED_MODEL
    assert settings.alias_target("gpt-4o-mini") == SHIPPED_MODEL
    assert settings.alias_target("gpt-3.5-turbo") == SHIPPED_MODEL
    assert settings.alias_target("gpt-4") is None
    assert settings.api_key is None


def test_toml_then_env_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "hearth.toml"
    path.write_text(
        'host = "0.0.0.0"\nport = 9000\napi_key = "from-file"\n'
        '[limits]\nmax_queue = 3\n'
        '[aliases]\n"my-chat" = "small"\n'
        '[[models]]\nid = "small"\nsource = "gemma-3-270m"\n'
        '[[models]]\nid = "other"\nsource = "/models/other.gguf"\npreload = false\ncontext_length = 1024\n'
    )
    settings = load_settings(path, env={"HEARTH_PORT": "9001", "HEARTH_MAX_QUEUE": "5"}, overrides={"port": 9002})
    assert settings.host == "0.0.0.0"
    assert settings.port == 9002  # CLI beats env beats file
    assert settings.limits.max_queue == 5
    assert settings.api_key == "from-file"
    assert settings.default_model == "small"  # the first model when none is named
    assert settings.alias_target("my-chat") == "small"
    other = settings.model_config_for("other")
    assert other is not None and not other.preload and other.context_length == 1024


def test_env_host_port_and_models() -> None:
    env = {"HEARTH_HOST": "0.0.0.0", "HEARTH_PORT": "8123", "HEARTH_MODELS": "a=/x/a.gguf,/y/b.gguf"}
    settings = load_settings(env=env)
    assert (settings.host, settings.port) == ("0.0.0.0", 8123)
    assert [(m.id, m.source) for m in settings.models] == [("a", "/x/a.gguf"), ("b", "/y/b.gguf")]
    assert settings.default_model == "a"


def test_hearth_config_env_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("port = 8555\n")
    assert load_settings(env={"HEARTH_CONFIG": str(path)}).port == 8555
    with pytest.raises(SettingsError, match="not a file"):
        load_settings(env={"HEARTH_CONFIG": str(tmp_path / "missing.toml")})


def test_ollama_models_env_is_honoured(tmp_path: Path) -> None:
    assert load_settings(env={"OLLAMA_MODELS": str(tmp_path)}).ollama.models_dir == tmp_path


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("prot = 8000\n", "prot"),  # a typo is an error, not a silent default
        ("port = 70000\n", "port"),
        ('default_model = "nope"\n', "default_model"),
        ('[aliases]\n"x" = "nope"\n', "alias"),
        ("[limits]\nmax_queue = -1\n", "max_queue"),
        ("port = \n", "reading"),
    ],
)
def test_invalid_settings_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(SettingsError, match=message):
        load_settings(path, env={})


def test_invalid_env_value_is_reported() -> None:
    with pytest.raises(SettingsError, match="port"):
        load_settings(env={"HEARTH_PORT": "eighty"})


def test_compile_ahead_is_on_unless_turned_off() -> None:
    assert load_settings(env={}).compile_ahead
    assert not load_settings(env={"HEARTH_COMPILE_AHEAD": "false"}).compile_ahead


def test_steps_per_submit_is_checked_with_its_variable_named() -> None:
    assert load_settings(env={}).steps_per_submit is None  # the engine's default for its adapter
    assert load_settings(env={"HEARTH_STEPS_PER_SUBMIT": "1"}).steps_per_submit == 1
    for bad in ("0", "17"):
        with pytest.raises(SettingsError, match=f"HEARTH_STEPS_PER_SUBMIT.*1 to 16 .*not {bad}"):
            load_settings(env={"HEARTH_STEPS_PER_SUBMIT": bad})


def test_config_imports_nothing_of_the_project() -> None:
    """config/ is a leaf: the model registry lives in models/, and settings name loaders as strings."""
    import ast

    project = {path.name for path in Path(__file__).resolve().parents[2].iterdir() if path.is_dir()} - {"config"}
    for source in (Path(__file__).resolve().parents[2] / "config").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            assert not {n.split(".")[0] for n in names} & project, (source.name, names)


def test_every_endpoint_family_is_a_group() -> None:
    groups = load_settings(env={}).groups()
    assert list(groups) == ["text", "embedding", "speech", "transcription", "rerank"]
    assert groups["rerank"].models == () and groups["rerank"].default is None  # no reranker is shipped
    assert groups["text"].default == SHIPPED_MODEL and "gpt-4o-mini" in groups["text"].aliases
    assert groups["text"].loader == "server.chat_worker:load_on_own_device"


def test_rerank_models_and_limit_from_toml_and_env(tmp_path: Path) -> None:
    config = tmp_path / "hearth.toml"
    config.write_text('[[rerank.models]]\nid = "ms-marco"\nsource = "/models/ms-marco.gguf"\n', encoding="utf-8")
    settings = load_settings(path=config, env={"HEARTH_MAX_RERANK_DOCUMENTS": "50"})
    assert [m.id for m in settings.rerank.models] == ["ms-marco"] and settings.rerank.default == "ms-marco"
    assert settings.rerank.loader == "server.rerank_worker:load_on_own_device"
    assert settings.limits.max_rerank_documents == 50
