"""Kokoro's voices: voicepack files, voice ids and what they say (language, gender), blends, and OpenAI's voice
names mapped onto the available voices.

A voice spec is a Kokoro id (af_bella), a blend of ids with `+` (an even mix) and optional weights in parentheses
(af_bella(2)+af_sky(1): two parts to one; packs are mixed as weighted means, as Kokoro-FastAPI does), or one of
OpenAI's names, each mapped to the first available voice of a preference list, else to the first voice of the
wanted gender, else to the first voice (the shipped voices are Japanese: alloy reaches jf_alpha).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.kokoro.convert import load_voices
from models.kokoro.phonemes import Language, PhonemizerError, language

VOICEPACK_SUFFIXES = (".pt", ".pth", ".npz", ".bin")

# OpenAI's voices: Kokoro v1.0 voices of a similar character first (several share the name), then the gender.
OPENAI_VOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "alloy": ("female", ("af_alloy", "af_heart", "af_bella")),
    "ash": ("male", ("am_adam", "am_michael")),
    "ballad": ("male", ("bm_lewis", "bm_george")),
    "coral": ("female", ("af_heart", "af_nicole", "bf_emma")),
    "echo": ("male", ("am_echo", "am_eric")),
    "fable": ("male", ("bm_fable", "bm_daniel")),
    "onyx": ("male", ("am_onyx", "am_fenrir")),
    "nova": ("female", ("af_nova", "af_sarah")),
    "sage": ("female", ("af_sarah", "af_river")),
    "shimmer": ("female", ("af_sky", "af_jessica")),
    "verse": ("male", ("am_michael", "am_liam")),
    "marin": ("female", ("af_kore", "af_aoede", "af_heart")),
    "cedar": ("male", ("am_puck", "am_liam")),
}
_PART = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\(\s*([0-9]*\.?[0-9]+)\s*\))?\s*$")


class VoiceError(ValueError):
    """A voice spec names a voice that is not available, or is malformed."""


def gender(voice_id: str) -> str:
    """Kokoro ids carry it in their second letter: af_ (female), am_ (male)."""
    tag = voice_id[1:2] if "_" in voice_id else ""
    return {"f": "female", "m": "male"}.get(tag, "unknown")


def voice_language(voice_id: str) -> Language:
    """The language a voice speaks, from its id's first letter; English for a voicepack without Kokoro's naming."""
    try:
        return language(voice_id)
    except PhonemizerError:
        return language("a")


def openai_voice(name: str, voices: dict[str, np.ndarray]) -> str:
    """The available voice an OpenAI voice name reaches."""
    wanted, preferred = OPENAI_VOICES[name]
    for voice_id in preferred:
        if voice_id in voices:
            return voice_id
    return next((v for v in voices if gender(v) == wanted), next(iter(voices)))


def openai_aliases(voices: dict[str, np.ndarray]) -> dict[str, str]:
    """Each OpenAI voice name -> the available voice it reaches."""
    return {name: openai_voice(name, voices) for name in OPENAI_VOICES}


@dataclass(frozen=True)
class Voice:
    """A resolved voice: its voicepack [510, 256] (one id's, or a weighted mix) and the language it speaks."""

    pack: np.ndarray
    language: Language
    ids: tuple[str, ...]


def resolve_voice(spec: str, voices: dict[str, np.ndarray]) -> Voice:
    """The voicepack for a voice spec; VoiceError when a part is unknown or malformed."""
    parts = []
    for text in spec.split("+"):
        match = _PART.match(text)
        if not match:
            raise VoiceError(f"voice {spec!r} is not a voice id, a blend like af_bella+af_sky or a weighted "
                             "blend like af_bella(2)+af_sky(1)")
        name, weight = match[1], float(match[2]) if match[2] else 1.0
        if name.lower() in OPENAI_VOICES and name not in voices:
            name = openai_voice(name.lower(), voices)
        if name not in voices:
            known = ", ".join(sorted(voices))
            raise VoiceError(f"voice {match[1]!r} is not available; the voices are {known} and OpenAI's names "
                             f"({', '.join(OPENAI_VOICES)})")
        if weight <= 0:
            raise VoiceError(f"voice weight of {name!r} must be positive")
        parts.append((name, weight))
    total = sum(w for _, w in parts)
    pack = sum(np.asarray(voices[n], np.float32) * (w / total) for n, w in parts)
    return Voice(np.asarray(pack, np.float32), voice_language(parts[0][0]), tuple(n for n, _ in parts))


def voicepack_files(paths: Iterable[str]) -> list[Path]:
    """The voicepack files named by paths: files as given, folders expanded (sorted, for stable ids)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name).expanduser()
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in VOICEPACK_SUFFIXES and p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"speech_voices: {name!r} is neither a voicepack file nor a folder")
    return files


def read_voicepacks(paths: Iterable[str]) -> dict[str, np.ndarray]:
    """Voice id -> float32 [510, 256] from every file or folder in paths (later files win on a repeated id)."""
    voices: dict[str, np.ndarray] = {}
    for path in voicepack_files(paths):
        for voice_id, pack in load_voices(path).items():
            voices[voice_id] = np.asarray(pack, np.float32).reshape(-1, 256)
    return voices
