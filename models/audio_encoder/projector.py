"""Finding the audio encoder in a projector file: llama.cpp's `mmproj-*.gguf` (architecture "clip") holds an audio
tower where `clip.has_audio_encoder` is set, its kind named by `clip.audio.projector_type`; Hearth runs "gemma4a"
(models/audio_encoder/gemma4.py). The file is the one models/vision/projector.py's find_projector finds for the
image encoder: one projector per model serves both.
"""

from __future__ import annotations

from pathlib import Path

from gguf import Keys, VisionProjectorType

from gpu.program import Executor
from models.audio_encoder import AudioEncoder
from models.audio_encoder.gemma4 import Gemma4AudioEncoder
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Progress

CLIP_ARCHITECTURE = "clip"
SUPPORTED_AUDIO_PROJECTORS: dict[str, type[Gemma4AudioEncoder]] = {VisionProjectorType.GEMMA4A: Gemma4AudioEncoder}


def has_audio_encoder(f: GGUFFile) -> bool:
    """Whether a GGUF is a projector file with an audio tower."""
    return f.arch == CLIP_ARCHITECTURE and bool(f.value(Keys.Clip.HAS_AUDIO_ENCODER, False))


def load_audio_encoder(path: str | Path, executor: Executor, progress: Progress | None = None,
                       ) -> AudioEncoder | None:
    """The audio encoder of a projector GGUF, its weights on the executor (the text model's); None where the file
    has no audio tower. An audio tower of a kind Hearth does not run is an error naming it."""
    f = GGUFFile(path)
    if not has_audio_encoder(f):
        return None
    kind = f.value(Keys.ClipAudio.PROJECTOR_TYPE, None) or f.value(Keys.Clip.PROJECTOR_TYPE, None)
    encoder = SUPPORTED_AUDIO_PROJECTORS.get(str(kind))
    if encoder is None:
        supported = ", ".join(str(k) for k in SUPPORTED_AUDIO_PROJECTORS)
        raise GGUFFormatError(f"{f.path.name}: audio projector type {kind!r} is not supported (supported: "
                              f"{supported})")
    return encoder(f, executor, progress)
