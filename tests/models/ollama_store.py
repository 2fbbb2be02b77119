"""A fake Ollama store for tests: a manifest per model and each GGUF linked in as its blob."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from models.ollama import DEFAULT_HOST, DEFAULT_NAMESPACE, MODEL_MEDIA_TYPE


def add_model(root: Path, gguf: Path, model: str, tag: str, namespace: str = DEFAULT_NAMESPACE,
              host: str = DEFAULT_HOST, digest_of: bytes | None = None) -> Path:
    """Write a manifest for `gguf` as host/namespace/model:tag; the blob is a symlink to the file.

    The digest is taken over digest_of (default: the path), not the file: hashing 253 MB per test is slow and
    nothing here checks blob contents against digests.
    """
    digest = hashlib.sha256(digest_of or str(gguf).encode()).hexdigest()
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / f"sha256-{digest}"
    if not blob.exists():
        blob.symlink_to(gguf)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64,
                   "size": 2},
        "layers": [
            {"mediaType": MODEL_MEDIA_TYPE, "digest": f"sha256:{digest}", "size": gguf.stat().st_size},
            {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "1" * 64, "size": 2},
        ],
    }
    path = root / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return path


def fake_gguf(path: Path, architecture: str) -> Path:
    """A GGUF header with only general.architecture (enough for discovery, not for loading)."""
    key, value = b"general.architecture", architecture.encode()
    import struct

    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    data += struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value
    path.write_bytes(data)
    return path
