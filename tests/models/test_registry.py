"""Ollama store discovery (models/ollama.py) and its place in the model registry (models/registry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import load_settings
from models import ollama
from models.registry import ModelRegistry
from tests.models.ollama_store import add_model, fake_gguf


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    root = tmp_path / "ollama"
    chat = fake_gguf(tmp_path / "chat.gguf", "gemma3")
    embed = fake_gguf(tmp_path / "embed.gguf", "nomic-bert")
    add_model(root, chat, "gemma3", "270m")
    add_model(root, chat, "gemma3", "latest")
    add_model(root, chat, "mymodel", "v1", namespace="someone")
    add_model(root, embed, "nomic-embed-text", "latest")
    broken = root / "manifests" / ollama.DEFAULT_HOST / "library" / "broken" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    return root


def test_names_parse_as_ollama_does() -> None:
    assert ollama.parse_name("gemma3:270m") == ("registry.ollama.ai", "library", "gemma3", "270m")
    assert ollama.parse_name("gemma3") == ("registry.ollama.ai", "library", "gemma3", "latest")
    assert ollama.parse_name("me/m:1") == ("registry.ollama.ai", "me", "m", "1")
    assert ollama.parse_name("host.io/me/m:1") == ("host.io", "me", "m", "1")
    for bad in ("../etc:passwd", "a/b/c/d", "", ":x", "gemma3:..", "a/../b:1"):
        assert ollama.parse_name(bad) is None, bad


def test_list_finds_chat_models_only(store: Path) -> None:
    names = [m.name for m in ollama.list_models(store)]
    assert names == ["gemma3:270m", "gemma3:latest", "someone/mymodel:v1"]
    assert [m.name for m in ollama.list_models(store, chat_only=False)].count("nomic-embed-text:latest") == 1


def test_find_resolves_the_blob(store: Path, tmp_path: Path) -> None:
    found = ollama.find_model("gemma3:270m", store)
    assert found is not None
    assert found.path.resolve() == (tmp_path / "chat.gguf").resolve()
    assert found.architecture == "gemma3"
    assert found.digest.startswith("sha256:")
    assert ollama.find_model("gemma3", store).name == "gemma3:latest"  # type: ignore[union-attr]
    assert ollama.find_model("nope:1", store) is None
    assert ollama.find_model("broken", store) is None


def test_models_dir_honours_ollama_models(tmp_path: Path) -> None:
    assert ollama.models_dir({"OLLAMA_MODELS": str(tmp_path)}) == tmp_path
    assert ollama.models_dir({}) == Path.home() / ".ollama" / "models"


def test_registry_lists_configured_aliases_and_ollama(store: Path) -> None:
    registry = ModelRegistry(load_settings(env={"OLLAMA_MODELS": str(store)}))
    entries = {e.id: e for e in registry.list()}
    assert list(entries)[:3] == ["gemma-3-270m", "gpt-4o-mini", "gpt-3.5-turbo"]
    assert entries["gpt-4o-mini"].alias_of == "gemma-3-270m"
    assert entries["gpt-4o-mini"].key == entries["gemma-3-270m"].key  # one worker for both names
    assert entries["gemma3:270m"].owned_by == "ollama"
    assert "nomic-embed-text:latest" not in entries
    # Both tags point at the same blob: they share a worker.
    assert registry.lookup("gemma3:270m").key == registry.lookup("gemma3").key  # type: ignore[union-attr]
    assert registry.lookup("nomic-embed-text") is None
    assert registry.lookup("unknown-model") is None


def test_registry_without_ollama(store: Path) -> None:
    settings = load_settings(env={"OLLAMA_MODELS": str(store), "HEARTH_OLLAMA": "false"})
    registry = ModelRegistry(settings)
    assert registry.lookup("gemma3:270m") is None
    assert all(e.owned_by == "hearth" for e in registry.list())


def test_int8_activations_from_the_server_or_the_model(store: Path, tmp_path: Path) -> None:
    """HEARTH_INT8_ACTIVATIONS sets every chat model's default (the Ollama store's too); a model's own setting
    wins; the numerics are part of the worker key, so the same file loads once per kind of matmul."""
    path = tmp_path / "hearth.toml"
    path.write_text('[[models]]\nid = "exact"\nsource = "gemma-3-270m"\nint8_activations = false\n'
                    '[[models]]\nid = "fast"\nsource = "gemma-3-270m"\n')
    env = {"OLLAMA_MODELS": str(store), "HEARTH_INT8_ACTIVATIONS": "true"}
    registry = ModelRegistry(load_settings(path, env=env))
    exact, fast, store_model = (registry.lookup(name) for name in ("exact", "fast", "gemma3:270m"))
    assert exact is not None and fast is not None and store_model is not None
    assert (exact.int8_activations, fast.int8_activations, store_model.int8_activations) == (False, True, True)
    assert exact.key != fast.key
    default = ModelRegistry(load_settings(env={"OLLAMA_MODELS": str(store)})).lookup("gemma-3-270m")
    assert default is not None and not default.int8_activations


def test_qwen3_embedding_in_the_store_is_an_embedding_model(tmp_path: Path) -> None:
    """Qwen3-Embedding and Qwen 3 share the GGUF architecture qwen3: the pooling type in the file tells them apart."""
    families = Path(__file__).resolve().parent.parent / "golden" / "families"
    root = tmp_path / "ollama"
    add_model(root, families / "qwen3_embedding.q8_0.gguf", "qwen3-embedding", "0.6b")
    add_model(root, families / "qwen3.q8_0.gguf", "qwen3", "0.6b")
    registry = ModelRegistry(load_settings(env={"OLLAMA_MODELS": str(root)}))
    assert registry.lookup("qwen3-embedding:0.6b").kind == "embedding"  # type: ignore[union-attr]
    assert registry.lookup("qwen3:0.6b").kind == "text"  # type: ignore[union-attr]
    kinds = {e.id: e.kind for e in registry.list() if e.owned_by == "ollama"}
    assert kinds == {"qwen3:0.6b": "text", "qwen3-embedding:0.6b": "embedding"}


def test_a_bert_cross_encoder_in_the_store_is_a_reranker(tmp_path: Path) -> None:
    """A bert GGUF with a classifier head (llama.cpp's `cls.output`) reranks; one without embeds."""
    golden = Path(__file__).resolve().parent.parent / "golden"
    root = tmp_path / "ollama"
    add_model(root, golden / "rerank_tiny.f32.gguf", "tiny-rerank", "latest")
    add_model(root, fake_gguf(tmp_path / "minilm.gguf", "bert"), "minilm", "latest")
    registry = ModelRegistry(load_settings(env={"OLLAMA_MODELS": str(root)}))
    assert registry.lookup("tiny-rerank").kind == "rerank"  # type: ignore[union-attr]
    assert registry.lookup("minilm").kind == "embedding"  # type: ignore[union-attr]
    kinds = {e.id: e.kind for e in registry.list() if e.owned_by == "ollama"}
    assert kinds == {"tiny-rerank:latest": "rerank", "minilm:latest": "embedding"}
