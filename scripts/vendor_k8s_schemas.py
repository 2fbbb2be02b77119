"""Write tests/docker/k8s-schemas.json: the Kubernetes JSON schemas that deploy/k8s's manifests are checked against.

The schemas are yannh/kubernetes-json-schema's (Apache-2.0) `v1.31.0-local-strict` set as the kubernetes-validate
wheel ships it; all of them weigh 20 MB, so only the kinds deploy/k8s uses are kept, each with the definitions it
reaches through `$ref` and without descriptions. A manifest is checked against its kind's schema with the
`$defs` beside it (tests/docker/test_deploy.py).

    pip download kubernetes-validate==1.37.0 --no-deps -d /tmp/kv && unzip -q -d /tmp/kv /tmp/kv/*.whl
    python scripts/vendor_k8s_schemas.py /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.31.0-local-strict
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "docker" / "k8s-schemas.json"
# (apiVersion, kind) -> the schema file of the set.
KINDS = {("apps/v1", "Deployment"): "deployment-apps-v1.json", ("v1", "Service"): "service-v1.json",
         ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscaler-autoscaling-v2.json"}
SCHEMA = "https://json-schema.org/draft/2020-12/schema"


def strip(node: Any, refs: set[str]) -> Any:
    """The schema without descriptions, its refs pointed into this file's definitions (collected in refs)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                continue
            if key == "$ref" and isinstance(value, str):
                name = value.split("#/$defs/", 1)[1]
                refs.add(name)
                value = f"#/$defs/{name}"
            out[key] = strip(value, refs)
        return out
    if isinstance(node, list):
        return [strip(item, refs) for item in node]
    return node


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schemas", type=Path, help="a *-local-strict folder of kubernetes-json-schema")
    args = parser.parse_args()
    definitions = json.loads((args.schemas / "_definitions.json").read_text())["$defs"]
    refs: set[str] = set()
    kinds = {f"{api} {kind}": strip(json.loads((args.schemas / name).read_text()), refs)
             for (api, kind), name in KINDS.items()}
    kept: dict[str, Any] = {}
    while refs - set(kept):
        name = sorted(refs - set(kept))[0]
        kept[name] = strip(definitions[name], refs)
    vendored = {"source": f"yannh/kubernetes-json-schema {args.schemas.name} (Apache-2.0), through the "
                "kubernetes-validate 1.37.0 wheel; scripts/vendor_k8s_schemas.py",
                "$schema": SCHEMA, "kinds": kinds, "$defs": dict(sorted(kept.items()))}
    OUT.write_text(json.dumps(vendored, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(kinds)} kinds, {len(kept)} definitions, {OUT.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
