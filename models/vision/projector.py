"""Finding and loading a chat model's image encoder: llama.cpp's projector GGUF (`mmproj-*.gguf` beside the text
model) or the projector layer of an Ollama manifest.

    path = find_projector(text_model_path)          # None: a text-only model
    encoder = load_image_encoder(path, executor)    # an ImageEncoder (models/vision/__init__.py)

A projector file is a GGUF of architecture "clip" whose `clip.projector_type` (or, in files that also hold an audio
encoder, `clip.vision.projector_type`) names the projector; Hearth runs "gemma3" (models/vision/gemma3.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gguf import Keys, VisionProjectorType

from gpu.program import Executor
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Progress
from models.ollama import MODEL_MEDIA_TYPE, gguf_architecture
from models.vision import ImageEncoder, ollama_gemma3
from models.vision.gemma3 import Gemma3ImageEncoder
from models.vision.gemma4 import Gemma4ImageEncoder

PROJECTOR_MEDIA_TYPE = "application/vnd.ollama.image.projector"
CLIP_ARCHITECTURE = "clip"
SUPPORTED_PROJECTORS: dict[str, type[Gemma3ImageEncoder] | type[Gemma4ImageEncoder]] = {
    VisionProjectorType.GEMMA3: Gemma3ImageEncoder, VisionProjectorType.GEMMA4V: Gemma4ImageEncoder}
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


def projector_type(f: GGUFFile) -> str:
    """The projector a `clip` GGUF holds, as its metadata names it."""
    if f.arch != CLIP_ARCHITECTURE:
        raise GGUFFormatError(f"{f.path.name}: architecture {f.arch!r} is not a projector (expected "
                              f"{CLIP_ARCHITECTURE!r}, as llama.cpp's convert_hf_to_gguf.py --mmproj writes)")
    if not f.value(Keys.Clip.HAS_VISION_ENCODER, False):
        raise GGUFFormatError(f"{f.path.name}: the projector has no vision encoder (audio-only projectors are not "
                              "supported)")
    kind = f.value(Keys.ClipVision.PROJECTOR_TYPE, None) or f.value(Keys.Clip.PROJECTOR_TYPE, None)
    if kind is None:
        raise GGUFFormatError(f"{f.path.name}: metadata key {Keys.Clip.PROJECTOR_TYPE} is missing")
    return str(kind)


def load_image_encoder(path: str | Path, executor: Executor, progress: Progress | None = None) -> ImageEncoder:
    """The image encoder of a projector GGUF (or of an Ollama gemma3 model blob that holds its vision tower), its
    weights on the executor (the text model's)."""
    f = GGUFFile(path)
    if f.arch != CLIP_ARCHITECTURE and ollama_gemma3.holds_vision(f):
        return Gemma3ImageEncoder(f, executor, progress, names=ollama_gemma3.NAMES, config=ollama_gemma3.config(f))
    kind = projector_type(f)
    encoder = SUPPORTED_PROJECTORS.get(kind)
    if encoder is None:
        supported = ", ".join(str(k) for k in SUPPORTED_PROJECTORS)
        raise GGUFFormatError(f"{f.path.name}: projector type {kind!r} is not supported (supported: {supported})")
    return encoder(f, executor, progress)


def find_projector(model_path: str | Path) -> Path | None:
    """The projector GGUF that goes with a text model file, or None when there is none.

    A plain file: an `mmproj*.gguf` in the same folder (the first by name when there are several: llama.cpp's
    converter names one per output type, `mmproj-<model>-<type>.gguf`). An Ollama blob (`<root>/blobs/sha256-<hex>`):
    the projector layer (mediaType application/vnd.ollama.image.projector) of the manifest whose model layer is that
    blob. Failing those, the model file itself where it holds the vision tower, as Ollama's own gemma3 models do
    (models/vision/ollama_gemma3.py).
    """
    path = Path(model_path)
    digest = _DIGEST.match(path.name)
    if path.parent.name == "blobs" and digest:
        found = _ollama_projector(path.parent.parent, f"sha256:{digest.group(1)}")
    else:
        found = next(iter(sorted(p for p in path.parent.glob("mmproj*.gguf") if p.is_file() and p != path)), None)
    if found is None and gguf_architecture(path) == ollama_gemma3.ARCHITECTURE:
        try:
            if ollama_gemma3.holds_vision(GGUFFile(path)):
                return path
        except GGUFFormatError:
            return None
    return found


def _ollama_projector(root: Path, digest: str) -> Path | None:
    """The projector blob of the manifest whose model layer has this digest."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return None
    for manifest in sorted(manifests.glob("*/*/*/*")):
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
            if not any(layer.get("mediaType") == MODEL_MEDIA_TYPE and layer.get("digest") == digest
                       for layer in layers):
                continue
            for layer in layers:
                match = _DIGEST.match(str(layer.get("digest", "")))
                if layer.get("mediaType") == PROJECTOR_MEDIA_TYPE and match:
                    projector = root / "blobs" / f"sha256-{match.group(1)}"
                    if projector.is_file():
                        return projector
        except (OSError, ValueError, AttributeError):
            continue
    return None
