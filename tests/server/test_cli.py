"""The `hearth` command: serve's host and port from flags and the environment, --model resolution, `python -m
server`'s commands, profile's run and generate's checks of its settings."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gpu.kv_cache import PAGE_TOKENS
from models.text import engine
from server.cli import COMMANDS, _parser, main, resolve_model
from tests.models.ollama_store import add_model, fake_gguf
from tests.server.live_server import SubprocessServer, free_port

FAKE = {"HEARTH_MODEL_LOADER": "tests.server.fake_model:load_fake_model", "HEARTH_OLLAMA": "false"}


def test_python_m_server_honours_hearth_port_and_the_port_flag_wins(tmp_path: Path) -> None:
    env_port = free_port()
    server = SubprocessServer(tmp_path / "a.log", env={**FAKE, "HEARTH_PORT": str(env_port)}, port=env_port,
                              port_flag=False)
    try:
        server.start(ready_timeout=60)
        assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == "gemma-3-270m"
    finally:
        server.stop()
    flagged = SubprocessServer(tmp_path / "b.log", env={**FAKE, "HEARTH_PORT": str(env_port)})
    try:
        flagged.start(ready_timeout=60)  # runs with --port <another free port>, which beats HEARTH_PORT
        assert flagged.port != env_port
        assert httpx.get(f"{flagged.url}/health").json()["status"] == "ok"
    finally:
        flagged.stop()


def test_python_m_server_runs_every_command() -> None:
    """`python -m server` is `hearth serve` without a command and `hearth COMMAND` with one: every command of the
    parser is one it passes on (`adapters` and `convert` went to serve as arguments and failed)."""
    subcommands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subcommands.choices) == set(COMMANDS)
    listed = subprocess.run([sys.executable, "-m", "server", "adapters"], capture_output=True, text=True,
                            timeout=120, check=False, cwd=Path(__file__).resolve().parents[2])
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip()


def test_serve_and_generate_arguments() -> None:
    args = _parser().parse_args(["serve", "--host", "0.0.0.0", "--port", "9000"])
    assert (args.host, args.port) == ("0.0.0.0", 9000)
    args = _parser().parse_args(["generate", "--max-tokens", "5", "--temperature", "0", "Hello"])
    assert (args.model, args.max_tokens, args.temperature, args.prompt) == ("gemma-3-270m", 5, 0.0, "Hello")


def test_generate_resolves_paths_and_ollama_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = fake_gguf(tmp_path / "m.gguf", "gemma3")
    store = tmp_path / "store"
    add_model(store, gguf, "gemma3", "270m")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    assert resolve_model("gemma-3-270m") == "gemma-3-270m"
    assert resolve_model(str(gguf)) == str(gguf)
    assert Path(resolve_model("gemma3:270m")).resolve() == gguf.resolve()
    with pytest.raises(SystemExit, match="no model"):
        resolve_model("missing:1b")


def test_the_hearth_console_script_points_at_main() -> None:
    import importlib
    import tomllib

    from tests.server.live_server import ROOT

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["hearth"]
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_profile_prints_the_prefill_and_both_decode_steps(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`hearth profile` on the shipped model: the kernels of its prefill and of decode steps of 1 and --batch
    sequences, on a KV pool that holds every sequence's prompt and the page its next token opens (the default pool
    held 32 prompts of 512 and no more, so the default command failed at its decode step)."""
    loaded: dict[str, object] = {}
    load = engine.load_text_model

    def recording_load(*args: object, **kwargs: object) -> object:
        loaded.update(kwargs)
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "load_text_model", recording_load)
    assert main(["profile", "--prompt-tokens", "16", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "prefill" in out
    assert "decode of 1 sequence(s) at position 16" in out and "decode of 2 sequence(s) at position 16" in out
    assert loaded["max_batch"] == 2 and loaded["pool_tokens"] >= 2 * (16 + PAGE_TOKENS)


@pytest.mark.parametrize(("flags", "message"), [(["--max-tokens", "0"], "--max-tokens must be at least 1"),
                                                (["--temperature", "-1"], "temperature must be >= 0"),
                                                (["--top-p", "2"], "top_p must be in (0, 1]")])
def test_generate_refuses_bad_settings_before_loading(monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                                      message: str) -> None:
    """A setting out of range ends `hearth generate` with a message saying which (not a traceback, not silence),
    before the model loads."""
    monkeypatch.setattr(engine, "load_text_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as exited:
        main(["generate", *flags, "Hello"])
    assert message in str(exited.value)
