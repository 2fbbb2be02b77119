"""A loaded Moonshine model: transcription over models/moonshine/net.py's network, with the API of
models/whisper/model.py's WhisperModel (server/protocols.py's TranscriptionModel).

    model = load_moonshine("~/models/moonshine-tiny")          # a Hugging Face folder
    for segment in model.transcribe(audio, TranscribeOptions()):  # float32 mono 16 kHz
        print(segment.start, segment.end, segment.text)

Moonshine reads a clip of any length in one encoder pass (no 30 s padding); longer audio is cut into windows
(models/moonshine/windows.py), each one segment. Decoding is greedy from <s> (sampling at a temperature above 0, no
fallback), within windows.token_limit. Moonshine is English-only, has no prompt conditioning (a
prompt is not used), no beam search and no word timing: the server refuses those requests naming the model.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu.device import Device, default_device
from gpu.program import Executor
from models.moonshine.checkpoint import is_moonshine_dir, load_checkpoint
from models.moonshine.net import SAMPLE_RATE, MoonshineNet, Progress
from models.moonshine.windows import MIN_SAMPLES, WINDOW_S, token_limit, windows
from models.whisper.decode import Segment, TranscribeOptions, UnknownLanguage

log = logging.getLogger("hearth.models")

__all__ = ["MoonshineModel", "Segment", "TranscribeOptions", "UnknownLanguage", "load_moonshine"]



class MoonshineModelNotFound(FileNotFoundError):
    """No Moonshine model at that path."""


@dataclass(frozen=True)
class _Decoded:
    tokens: list[int]
    avg_logprob: float


class MoonshineModel:
    """A loaded Moonshine model (one caller at a time: the GPU state of a window, its cache and programs are
    shared)."""

    sample_rate = SAMPLE_RATE
    multilingual = False
    languages: tuple[str, ...] = ("en",)
    n_mels = 0  # raw audio in, no log-mel
    word_timestamps = False  # no alignment heads or timestamp tokens
    beam_search = False

    def __init__(self, name: str, net: MoonshineNet) -> None:
        self.name = name
        self.net = net

    def detect_language(self, audio: np.ndarray) -> tuple[str, float]:
        """English: the published Moonshine models know no other language."""
        return "en", 1.0

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        """A segment per window of float32 mono 16 kHz audio, yielded as each finishes. Raises UnknownLanguage
        (before any work) for a language other than English; ValueError for options Moonshine lacks (translation,
        word timestamps, beam search). should_stop: asked before every GPU step (the encoder's programs, each
        token); when it says so the transcription ends with concurrent.futures.CancelledError."""
        options = options or TranscribeOptions()
        if options.language not in (None, "en"):
            raise UnknownLanguage(options.language)
        if options.task != "transcribe" or options.word_timestamps or options.beam_size > 1:
            raise ValueError(f"Moonshine does not do task={options.task}, word_timestamps="
                             f"{options.word_timestamps}, beam_size={options.beam_size}")
        return self._stoppable(self._segments(np.asarray(audio, np.float32), options), should_stop)

    def _stoppable(self, segments: Iterator[Segment], should_stop: Callable[[], bool] | None) -> Iterator[Segment]:
        self.net.should_stop = should_stop
        try:
            yield from segments
        finally:
            self.net.should_stop = None

    def _segments(self, audio: np.ndarray, options: TranscribeOptions) -> Iterator[Segment]:
        temps = options.temperature if isinstance(options.temperature, tuple) else (options.temperature,)
        temperature = float(temps[0]) if temps else 0.0
        rng = np.random.default_rng(options.seed)
        bounds = windows(audio, self.net.max_samples)
        index = 0
        for start, end in bounds:
            decoded = self._decode_window(audio[start:end], temperature, rng)
            text = self.net.tokenizer.decode(decoded.tokens, skip_special_tokens=True).strip()
            if not text:
                continue
            raw = text.encode()
            yield Segment(id=index, start=start / SAMPLE_RATE, end=end / SAMPLE_RATE, text=" " + text,
                          tokens=decoded.tokens, temperature=temperature, avg_logprob=decoded.avg_logprob,
                          compression_ratio=len(raw) / len(zlib.compress(raw)), no_speech_prob=0.0)
            index += 1

    def _decode_window(self, audio: np.ndarray, temperature: float, rng: np.random.Generator) -> _Decoded:
        """Encode one window, then decode from <s> to </s> or the token bound (greedy, or sampled at temperature)."""
        c = self.net.config
        if audio.size < MIN_SAMPLES:  # the stem needs this many samples for one encoder row
            audio = np.pad(audio, (0, MIN_SAMPLES - audio.size))
        self.net.encode(audio)
        limit = token_limit(audio.size, c.n_text_ctx)
        token, tokens, logprob = c.bos, [], 0.0
        for position in range(limit):
            logits = self.net.decode(token, position).astype(np.float64)
            logp = logits - logits.max()
            logp -= np.log(np.exp(logp).sum())
            if temperature > 0:
                p = np.exp(logp / temperature)
                token = int(rng.choice(p.size, p=p / p.sum()))
            else:
                token = int(np.argmax(logits))
            logprob += float(logp[token])
            if token == c.eos:
                break
            tokens.append(token)
        return _Decoded(tokens, logprob / max(1, len(tokens) + (token == c.eos)))


def load_moonshine(source: str, *, device: Device | None = None, progress: Progress | None = None) -> MoonshineModel:
    """Load a Moonshine model from a Hugging Face folder (config.json, model.safetensors, tokenizer.json)."""
    started = time.perf_counter()
    path = Path(source).expanduser()
    if not is_moonshine_dir(path):
        raise MoonshineModelNotFound(f"{source!r} is not a Moonshine model folder (config.json with model_type "
                                     "'moonshine', model.safetensors, tokenizer.json)")
    ckpt = load_checkpoint(path)
    net = MoonshineNet(Executor(device or default_device()), ckpt, int(WINDOW_S * SAMPLE_RATE), progress)
    log.info("loaded Moonshine model %s (%.0f MB of weights, hidden %d, %d+%d layers) in %.1f s", path.name,
             net.weight_bytes / 1e6, ckpt.config.d_model, ckpt.config.enc_layers, ckpt.config.dec_layers,
             time.perf_counter() - started)
    return MoonshineModel(path.name, net)
