"""docker/: the compose file is valid Compose, the images install through the same scripts/setup.sh as CI, and the
image's health check works against a live server.

`docker compose config` runs where the Compose plugin is installed; elsewhere (this machine has the docker CLI but
no Compose plugin and no daemon) the file is checked against the Compose Specification's JSON schema
(tests/docker/compose-spec.json, from compose-spec/compose-spec at 170098b, Apache-2.0), which is what
`docker compose config` validates it with.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
import yaml

from config.settings import load_settings
from server.app import create_app
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
SPEC = Path(__file__).with_name("compose-spec.json")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # resolves the x-hearth anchor and `<<` merges as Compose does


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            joined.append(current.strip())
            current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in joined]


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each build stage's instructions by stage name."""
    out: dict[str, list[tuple[str, str]]] = {}
    name = ""
    for op, args in instructions():
        if op == "FROM":
            name = args.split(" AS ")[-1].strip() if " AS " in args else args
            out[name] = []
        out[name].append((op, args))
    return out


def test_the_compose_file_follows_the_compose_specification() -> None:
    validator = jsonschema_rs.validator_for(json.loads(SPEC.read_text()))
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []


def test_docker_compose_config_accepts_it() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("the docker Compose plugin is not installed here (the file is checked against the Compose "
                    "Specification's schema instead)")
    for profile in ("gpu", "dri", "cpu"):
        result = subprocess.run([docker, "compose", "-f", str(COMPOSE), "--profile", profile, "config", "--quiet"],
                                capture_output=True, text=True, env={**os.environ, "HEARTH_API_KEY": "k"})
        assert result.returncode == 0, result.stderr


def test_profiles_gpu_dri_and_cpu_each_run_one_service_of_the_right_image() -> None:
    services = compose()["services"]
    by_profile = {profile: name for name, service in services.items() for profile in service["profiles"]}
    assert by_profile == {"gpu": "hearth-gpu", "dri": "hearth-dri", "cpu": "hearth-cpu"}
    targets = set(stages())
    for name, service in services.items():
        build = service["build"]
        assert (build["context"], build["dockerfile"]) == ("..", "docker/Dockerfile") and build["target"] in targets
        assert service["ports"] == ["${HEARTH_PUBLISH:-127.0.0.1:8000}:8000"]  # loopback unless told otherwise
        # The Ollama store comes in read-only; so does the GGUF folder.
        assert "${OLLAMA_MODELS:-~/.ollama/models}:/models/ollama:ro" in service["volumes"]
        assert all(volume.endswith(":ro") for volume in service["volumes"])
        assert {"HEARTH_API_KEY", "HEARTH_CORS_ORIGINS", "HEARTH_KEEP_ALIVE"} <= set(service["environment"])
    gpu = services["hearth-gpu"]
    assert gpu["build"]["target"] == "gpu"
    assert "graphics" in gpu["environment"]["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    device = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "graphics" in device["capabilities"]
    assert services["hearth-dri"]["devices"] == ["/dev/dri:/dev/dri"]


def test_every_environment_variable_the_compose_file_sets_is_a_setting() -> None:
    env = {k: "" for k in compose()["services"]["hearth-gpu"]["environment"] if k.startswith("HEARTH_")}
    defaults = {"HEARTH_KEEP_ALIVE": "5m", "HEARTH_MAX_LOADED_MODELS": "3", "HEARTH_REQUEST_TIMEOUT": "600",
                "HEARTH_LOG_FORMAT": "json", "HEARTH_LOG_LEVEL": "info", "HEARTH_API_KEY": "a,b",
                "HEARTH_CORS_ORIGINS": "https://x.example"}
    from config import settings as settings_module

    assert set(env) <= set(settings_module._ENV_KEYS) | {"HEARTH_MODELS"}
    settings = load_settings(path=None, env={**env, **defaults})
    assert settings.api_keys() == ("a", "b") and settings.log_format == "json"


def test_the_image_installs_through_scripts_setup_sh_as_ci_does() -> None:
    """CI runs `.ci/run` -> `make test` -> `make setup` -> `bash scripts/setup.sh`; the image runs that script and
    installs no Python package any other way."""
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: setup\b", makefile, re.M) and re.search(r"^setup:\n\tbash scripts/setup\.sh$", makefile,
                                                                       re.M)
    assert re.search(r"^serve: setup\n\t\$\(PY\) -m server", makefile, re.M)
    runs = [args for op, args in instructions() if op == "RUN"]
    assert not any(re.search(r"\bpip\b|\buv\b|poetry|ensurepip", run) for run in runs), runs
    per_stage = {name: [args for op, args in body if op == "RUN"] for name, body in stages().items()}
    assert any("scripts/setup.sh" in run for run in per_stage["base"])  # venv, packages, model file
    assert any("scripts/setup.sh" in run for run in per_stage["cpu"])  # its adapter step: Mesa through apt
    assert stages()["gpu"][0] == ("FROM", "cpu AS gpu")
    # The server starts as `make serve` starts it.
    assert dict(instructions())["CMD"] == '["/app/.venv/bin/python", "-m", "server"]'
    # setup.sh's inputs are in the build context.
    ignored = [line.strip() for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for needed in ("pyproject.toml", "README.md", "scripts", "server", "gpu", "models", "audio", "config"):
        assert needed not in ignored


def test_the_image_runs_as_a_non_root_user() -> None:
    for name in ("cpu", "gpu"):
        users = [args for op, args in stages()[name] if op == "USER"]
        assert users and users[-1] == "hearth", name
    base = dict((op, args) for op, args in stages()["base"])
    assert "useradd" in " ".join(args for op, args in stages()["base"] if op == "RUN")
    assert "--chown=hearth:hearth" in base["COPY"]


def healthcheck_command() -> list[str]:
    """The image's HEALTHCHECK command, with this interpreter in place of the image's."""
    check = dict(instructions())["HEALTHCHECK"]
    command = check.split(" CMD ", 1)[1]
    assert "/ready" in command and "--start-period=" in check
    return [sys.executable if part == "/app/.venv/bin/python" else part for part in shlex.split(command)]


def test_the_health_check_passes_once_ready_and_fails_before() -> None:
    gate = threading.Event()
    inner = fake_loader()

    def slow(source: str, **kwargs: Any) -> Any:
        gate.wait(20)
        return inner(source, **kwargs)

    app = create_app(load_settings(path=None, env={"HEARTH_OLLAMA": "false", "HEARTH_API_KEY": "k"}), loader=slow)
    with ThreadServer(app) as server:
        env = {**os.environ, "HEARTH_PORT": str(server.port)}
        loading = subprocess.run(healthcheck_command(), env=env, capture_output=True, timeout=30)
        assert loading.returncode != 0  # /ready is 503 while the default model loads
        gate.set()
        for _ in range(100):
            if httpx.get(f"{server.url}/ready").status_code == 200:
                break
        ready = subprocess.run(healthcheck_command(), env=env, capture_output=True, timeout=30)
        assert ready.returncode == 0, ready.stderr  # and it needs no API key
