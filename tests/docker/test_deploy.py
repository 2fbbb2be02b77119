"""deploy/ and docker/docker-compose.ray.yml: the Kubernetes manifests follow the Kubernetes 1.31 schemas (vendored,
offline: tests/docker/k8s-schemas.json, scripts/vendor_k8s_schemas.py) and fit together and with the app (probes on
routes that exist, the autoscaler's metric one Hearth exports); the Ray compose file follows the Compose
Specification and runs the documented `serve run` config, whose args the deployment builder accepts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml

from config.settings import load_settings
from server.app import create_app
from server.metrics import Metrics
from tests.docker.test_compose import SPEC, stages

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = json.loads(Path(__file__).with_name("k8s-schemas.json").read_text())
RAY_COMPOSE = ROOT / "docker" / "docker-compose.ray.yml"
SERVE_CONFIG = ROOT / "deploy" / "ray" / "serve.yaml"


def manifests() -> dict[str, dict[str, Any]]:
    """Every object of deploy/k8s/*.yaml by kind."""
    objects = [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    by_kind = {obj["kind"]: obj for obj in objects}
    assert len(by_kind) == len(objects), "one object of each kind"
    return by_kind


def k8s_errors(obj: dict[str, Any]) -> list[str]:
    schema = {**SCHEMAS["kinds"][f"{obj['apiVersion']} {obj['kind']}"], "$schema": SCHEMAS["$schema"],
              "$defs": SCHEMAS["$defs"]}
    return [f"{'/'.join(map(str, e.instance_path))}: {e.message}"
            for e in jsonschema_rs.validator_for(schema).iter_errors(obj)]


def test_the_manifests_follow_the_kubernetes_schemas() -> None:
    objects = manifests()
    assert set(objects) == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    for obj in objects.values():
        assert k8s_errors(obj) == [], obj["kind"]
    # The schemas are strict: a misspelt field or a wrong type is caught, so the check above means something.
    deployment = objects["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert k8s_errors({**deployment, "spec": {**deployment["spec"], "replica": 2}})
    assert k8s_errors({**deployment, "spec": {**deployment["spec"], "replicas": "two"}})
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/ready"
    assert k8s_errors(broken) and container["readinessProbe"]["httpGet"]["path"] == "/ready"


def test_the_manifests_fit_together_and_fit_the_app() -> None:
    objects = manifests()
    deployment, service, hpa = objects["Deployment"], objects["Service"], objects["HorizontalPodAutoscaler"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8000} and service["spec"]["ports"][0]["targetPort"] == "http"
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert "graphics" in {e["name"]: e.get("value") for e in container["env"]}["NVIDIA_DRIVER_CAPABILITIES"]
    # Readiness on /ready, liveness on /health: routes of the app, on the container's port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    routes = set(create_app(load_settings(env={})).openapi()["paths"])
    assert {"/ready", "/health", "/metrics"} <= routes
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = load_settings(env={k: v for k, v in env.items() if k.startswith("HEARTH_")})
    assert settings.adapters == ("all",) and settings.host == "0.0.0.0"
    # The autoscaler scales this Deployment on a metric Hearth exports.
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    exported = {family.name for family in Metrics().registry.collect()}
    assert metric["pods"]["metric"]["name"] in exported


def ray_compose() -> dict[str, Any]:
    return yaml.safe_load(RAY_COMPOSE.read_text())


def test_the_ray_compose_file_follows_the_compose_specification() -> None:
    validator = jsonschema_rs.validator_for(json.loads(SPEC.read_text()))
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(ray_compose())]
    assert errors == []
    services = ray_compose()["services"]
    assert {name: service["profiles"] for name, service in services.items()} == {"ray-head": ["head"],
                                                                                 "ray-worker": ["worker"]}
    for service in services.values():
        assert service["build"]["target"] == "ray" and service["build"]["target"] in stages()
        assert service["network_mode"] == "host" and "graphics" in service["environment"]["NVIDIA_DRIVER_CAPABILITIES"]
    head = " ".join(services["ray-head"]["command"])
    assert "ray start --head --port=6379" in head and "serve run deploy/ray/serve.yaml" in head
    assert "--address=$${RAY_HEAD" in " ".join(services["ray-worker"]["command"])
    # The ray image installs its extra through scripts/setup.sh, as every other stage installs what it needs.
    runs = [args for op, args in stages()["ray"] if op == "RUN"]
    assert runs == ["HEARTH_EXTRAS=models,ray HEARTH_SKIP_DRIVER=1 bash scripts/setup.sh"]


def test_the_serve_config_names_the_builder_and_args_it_accepts() -> None:
    pytest.importorskip("ray.serve", reason="the `ray` extra (make test installs it)")
    from server.serve_ray import build

    config = yaml.safe_load(SERVE_CONFIG.read_text())
    (app,) = config["applications"]
    assert app["import_path"] == "server.serve_ray:build" and app["route_prefix"] == "/"
    assert config["http_options"]["port"] == 8000
    deployment = build(app["args"])._bound_deployment
    assert deployment.ray_actor_options["num_gpus"] == 1
    autoscaling = deployment._deployment_config.autoscaling_config
    assert (autoscaling.min_replicas, autoscaling.max_replicas) == (1, 4)
    assert autoscaling.target_ongoing_requests == app["args"]["target_ongoing_requests"]
    # Its settings are settings Hearth knows.
    load_settings(env=app["args"]["env"])
