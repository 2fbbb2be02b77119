"""Discovery of the chat models in a user's Ollama store.

Layout (Ollama's own): `<root>/manifests/<host>/<namespace>/<model>/<tag>` is a JSON manifest whose layer of
mediaType `application/vnd.ollama.image.model` names the GGUF blob `<root>/blobs/sha256-<hex>`. The root is
`$OLLAMA_MODELS` when set, else `~/.ollama/models`. Names follow Ollama: `gemma3:270m` is
registry.ollama.ai/library/gemma3/270m, `gemma3` means tag `latest`, `user/model:tag` lives in namespace
`user`, and a name with three path parts names its host.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
# GGUF architectures that embed text rather than generate it; Ollama stores both kinds side by side.
EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "t5encoder",
                                     "gemma-embedding", "xlm-roberta", "modern-bert", "neo-bert"})
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_GGUF_STRING = 8  # GGUF metadata value type of a string
_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass(frozen=True)
class OllamaModel:
    """One model in the store: its short name, its GGUF blob and what the manifest says of it."""

    name: str  # as Ollama prints it, e.g. "gemma3:270m"
    path: Path  # the GGUF blob
    digest: str  # "sha256:<hex>" of the blob
    size: int  # bytes of the blob
    modified: float  # manifest mtime, seconds since the epoch
    architecture: str | None  # GGUF general.architecture when readable


def models_dir(env: Mapping[str, str] | None = None) -> Path:
    """The store root: $OLLAMA_MODELS, else ~/.ollama/models."""
    env = os.environ if env is None else env
    return Path(env.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def parse_name(name: str) -> tuple[str, str, str, str] | None:
    """(host, namespace, model, tag) of an Ollama model name, or None if it is not one.

    Every part must be a plain path component, so a name can never reach outside the store.
    """
    base, _, tag = name.partition(":")
    tag = tag or DEFAULT_TAG
    parts = base.split("/")
    if len(parts) == 1:
        parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [DEFAULT_HOST, *parts]
    if len(parts) != 3 or not all(_PART.fullmatch(p) and ".." not in p for p in (*parts, tag)):
        return None
    host, namespace, model = parts
    return host.lower(), namespace, model, tag


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The shortest name Ollama accepts for these parts."""
    if host == DEFAULT_HOST and namespace == DEFAULT_NAMESPACE:
        return f"{model}:{tag}"
    if host == DEFAULT_HOST:
        return f"{namespace}/{model}:{tag}"
    return f"{host}/{namespace}/{model}:{tag}"


def gguf_architecture(path: Path) -> str | None:
    """general.architecture from a GGUF header, reading only the first few metadata entries.

    llama.cpp's writers put it first; anything unexpected (not GGUF, an array before it) gives None.
    """
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return None
            _version, _n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
            for _ in range(min(n_kv, 16)):
                (key_len,) = struct.unpack("<Q", f.read(8))
                if key_len > 1024:
                    return None
                key = f.read(key_len).decode("utf-8", "replace")
                (value_type,) = struct.unpack("<I", f.read(4))
                if value_type == _GGUF_STRING:
                    (value_len,) = struct.unpack("<Q", f.read(8))
                    if value_len > 1 << 16:
                        return None
                    value = f.read(value_len)
                    if key == "general.architecture":
                        return value.decode("utf-8", "replace")
                elif value_type in _GGUF_SCALAR_SIZES:
                    f.read(_GGUF_SCALAR_SIZES[value_type])
                else:
                    return None
    except (OSError, struct.error):
        return None
    return None


def _read_manifest(root: Path, path: Path, name: str) -> OllamaModel | None:
    """The model a manifest describes, or None when it has no readable GGUF model layer."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        layer = next(layer for layer in manifest.get("layers", []) if layer.get("mediaType") == MODEL_MEDIA_TYPE)
        match = _DIGEST.match(str(layer.get("digest", "")))
        if match is None:
            return None
        blob = root / "blobs" / f"sha256-{match.group(1)}"
        if not blob.is_file():
            return None
        return OllamaModel(name=name, path=blob, digest=f"sha256:{match.group(1)}", size=blob.stat().st_size,
                           modified=path.stat().st_mtime, architecture=gguf_architecture(blob))
    except (OSError, ValueError, StopIteration, AttributeError):
        return None


def find_model(name: str, root: Path | None = None) -> OllamaModel | None:
    """The model an Ollama name refers to, or None when the store has no such (GGUF) model."""
    parts = parse_name(name)
    if parts is None:
        return None
    root = root or models_dir()
    manifest = root.joinpath("manifests", *parts)
    if not manifest.is_file():
        return None
    return _read_manifest(root, manifest, display_name(*parts))


def list_models(root: Path | None = None, chat_only: bool = True) -> list[OllamaModel]:
    """Every model in the store, sorted by name; chat_only drops embedding models."""
    root = root or models_dir()
    manifests = root / "manifests"
    found = []
    if not manifests.is_dir():
        return found
    for path in manifests.glob("*/*/*/*"):
        if not path.is_file():
            continue
        host, namespace, model, tag = path.relative_to(manifests).parts
        if parse_name(f"{host}/{namespace}/{model}:{tag}") is None:
            continue
        entry = _read_manifest(root, path, display_name(host.lower(), namespace, model, tag))
        if entry is None or (chat_only and entry.architecture in EMBEDDING_ARCHITECTURES):
            continue
        found.append(entry)
    return sorted(found, key=lambda m: m.name)
