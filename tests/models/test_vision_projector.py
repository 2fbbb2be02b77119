"""Finding a chat model's projector (models/vision/projector.py's find_projector): an mmproj*.gguf beside a plain
GGUF, the projector layer of an Ollama manifest, and none for a text-only model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from models.vision.projector import PROJECTOR_MEDIA_TYPE, find_projector
from tests.models.ollama_store import add_model, fake_gguf
from tests.models.vision_files import ollama_combined


def test_mmproj_beside_the_model(tmp_path: Path) -> None:
    model = fake_gguf(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf", "gemma3")
    assert find_projector(model) is None
    fake_gguf(tmp_path / "mmproj-gemma-3-4b-it-f16.gguf", "clip")
    fake_gguf(tmp_path / "mmproj-gemma-3-4b-it-f32.gguf", "clip")
    assert find_projector(model) == tmp_path / "mmproj-gemma-3-4b-it-f16.gguf"


def _add_projector(manifest: Path, root: Path, projector: Path) -> Path:
    digest = hashlib.sha256(str(projector).encode()).hexdigest()
    blob = root / "blobs" / f"sha256-{digest}"
    blob.symlink_to(projector)
    data = json.loads(manifest.read_text())
    data["layers"].insert(1, {"mediaType": PROJECTOR_MEDIA_TYPE, "digest": f"sha256:{digest}",
                              "size": projector.stat().st_size})
    manifest.write_text(json.dumps(data))
    return blob


def test_ollama_manifest_projector_layer(tmp_path: Path) -> None:
    root = tmp_path / "store"
    files = tmp_path / "files"
    files.mkdir()
    vision = fake_gguf(files / "model-a.gguf", "gemma3")
    text_only = fake_gguf(files / "model-b.gguf", "gemma3")
    manifest = add_model(root, vision, "gemma3", "4b")
    add_model(root, text_only, "gemma3", "1b")
    projector_blob = _add_projector(manifest, root, fake_gguf(files / "projector.gguf", "clip"))
    blobs = {json.loads(m.read_text())["layers"][0]["digest"].split(":")[1]: m.name
             for m in (root / "manifests").glob("*/*/*/*")}
    by_tag = {tag: root / "blobs" / f"sha256-{digest}" for digest, tag in blobs.items()}
    assert find_projector(by_tag["4b"]) == projector_blob
    assert find_projector(by_tag["1b"]) is None
    # Other mmproj files in the blob folder are not the model's.
    assert find_projector(root / "blobs" / ("sha256-" + "f" * 64)) is None


def test_ollama_blob_holding_the_tower(tmp_path: Path) -> None:
    """An Ollama gemma3 model whose blob holds the vision tower (no projector layer) is its own projector."""
    vision_dir = Path(__file__).resolve().parent.parent / "golden" / "vision"
    combined = ollama_combined(tmp_path, vision_dir / "mmproj-gemma3_tiny.f16.gguf")
    root = tmp_path / "store"
    add_model(root, combined, "gemma3", "4b")
    blob = next((root / "blobs").iterdir())
    assert find_projector(blob) == blob
    text_only = fake_gguf(tmp_path / "text.gguf", "gemma3")
    assert find_projector(text_only) is None
