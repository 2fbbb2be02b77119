"""Decode uploaded audio (any container and codec FFmpeg reads) to mono float32 at a fixed sample rate, in memory.

PyAV opens the bytes through an io.BytesIO, decodes the first audio stream and runs every frame through one
``av.AudioResampler`` (FFmpeg's swresample) that downmixes to mono and converts to the target rate, as
faster-whisper's ``decode_audio`` does, so Hearth and its reference see the same samples. Nothing touches the disk.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import av
import numpy as np

DEFAULT_SAMPLE_RATE = 16000  # Hz, what Whisper takes
_INITIAL_SECONDS = 60.0  # the output buffer's first size when nothing bounds the length


class AudioDecodeError(ValueError):
    """The upload is not decodable audio; the message says why (and names the container format when known)."""


class NonFiniteAudio(AudioDecodeError):
    """The audio decodes to samples that are NaN or infinite (a float file holding them, or values past float32's
    range), which no model can hear; ``at_s`` is where the first one is."""

    def __init__(self, at_s: float) -> None:
        super().__init__(f"the audio holds samples that are not finite numbers (NaN or infinity, or values beyond "
                         f"float32's range), the first at {at_s:.3f} s")
        self.at_s = at_s


class AudioTooLong(ValueError):
    """The audio lasts longer than the caller's ``max_seconds``: raised while decoding, as soon as the frames decoded
    so far (or the container's declared duration) pass the limit, before the samples past it are made."""

    def __init__(self, limit_s: float, seen_s: float, *, declared: bool) -> None:
        how = "the file declares" if declared else "decoding reached"
        super().__init__(f"the audio is longer than {limit_s:g} s ({how} {seen_s:.1f} s)")
        self.limit_s = limit_s
        self.seen_s = seen_s
        self.declared = declared


def duration_s(audio: np.ndarray, sample_rate: int = DEFAULT_SAMPLE_RATE) -> float:
    """Length in seconds of mono ``audio`` at ``sample_rate``."""
    return audio.shape[-1] / sample_rate


def _frames(container: av.container.InputContainer, stream: av.audio.stream.AudioStream) -> Iterator[av.AudioFrame]:
    """Decoded frames of ``stream``, skipping packets FFmpeg cannot decode once decoding has started.

    A damaged packet in the middle of an otherwise good file (a truncated upload, a glitch in a recording) should
    cost that packet's few milliseconds, not the whole request; faster-whisper skips them the same way.
    """
    for packet in container.demux(stream):
        try:
            yield from packet.decode()
        except av.error.InvalidDataError:
            continue


def _declared_seconds(container: av.container.InputContainer, stream: av.audio.stream.AudioStream) -> float:
    """The longest duration the container or the stream declares (0 when neither does). FFmpeg may have estimated
    it from the bit rate; it only lets a file be refused early, never accepted: the frames are counted anyway."""
    seconds = container.duration / av.time_base if container.duration else 0.0
    if stream.duration and stream.time_base:
        seconds = max(seconds, float(stream.duration * stream.time_base))
    return seconds


class _Samples:
    """The decoded output, copied into one growing float32 buffer as it comes: no list of chunks and no final
    concatenation, so the audio is never held twice. With a known bound the buffer is allocated at that size
    once; pages the decoder never writes are never touched, so they cost no memory."""

    def __init__(self, capacity: int) -> None:
        self.buffer = np.empty(max(capacity, 1), dtype=np.float32)
        self.size = 0

    def append(self, chunk: np.ndarray) -> None:
        end = self.size + chunk.size
        if end > self.buffer.size:
            self.buffer.resize(max(end, 2 * self.buffer.size), refcheck=False)  # realloc: no second copy held
        self.buffer[self.size:end] = chunk
        self.size = end

    def result(self) -> np.ndarray:
        self.buffer.resize(self.size, refcheck=False)  # shrinks in place
        return self.buffer


def decode_audio(data: bytes, *, sample_rate: int = DEFAULT_SAMPLE_RATE,
                 max_seconds: float | None = None) -> np.ndarray:
    """Decode ``data`` (flac, mp3, mp4/m4a, mpeg/mpga, ogg/opus, wav, webm, ...) to mono float32 [samples].

    Channels are downmixed and the audio resampled to ``sample_rate`` by FFmpeg's swresample. Samples are in
    [-1, 1] for mono input. They are not clipped, to stay sample-for-sample with faster-whisper and ``ffmpeg -ac 1``:
    lossy codecs can overshoot slightly, and FFmpeg's default downmix adds channels with coefficients up to 1 (a
    stereo file's loud identical channels reach sqrt(2), a 5.1 file's up to 3.4).

    ``max_seconds`` bounds the work and memory a small file can demand (a WAV at 1 Hz is an hour of audio in
    3.6 KB, and 16 kHz output is 16,000 times its samples): a container that declares a longer duration is refused
    before decoding, and each decoded frame's duration (its samples at its own rate) is added up and checked before
    the resampler expands it, so the output never holds more than ``max_seconds`` of audio plus the resampler's
    last few samples, whatever the declared duration, rate or channel count.

    Raises:
        AudioTooLong: the audio lasts longer than ``max_seconds``.
        NonFiniteAudio: a decoded sample is NaN or infinite.
        AudioDecodeError: the bytes are empty or not a container FFmpeg can read, the container has no audio
            stream, its codec cannot be decoded, or it holds no samples.
    """
    if not data:
        raise AudioDecodeError("the audio file is empty (0 bytes)")
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except av.error.FFmpegError as exc:
        raise AudioDecodeError(
            "not a readable audio file: FFmpeg recognises no container format in it, or it is damaged or cut "
            f"short ({exc.strerror})"
        ) from exc
    with container:
        fmt = container.format.name
        if not container.streams.audio:
            kinds = sorted({s.type for s in container.streams}) or ["nothing"]
            raise AudioDecodeError(f"the {fmt} file has no audio stream (it holds {', '.join(kinds)})")
        stream = container.streams.audio[0]
        codec = stream.codec_context.name if stream.codec_context else "unknown codec"
        declared = _declared_seconds(container, stream)
        if max_seconds is not None and declared > max_seconds:
            raise AudioTooLong(max_seconds, declared, declared=True)
        # A bounded length fixes the buffer's size; a declared one is only a first guess.
        bound = max_seconds if max_seconds is not None else (declared or _INITIAL_SECONDS)
        samples = _Samples(math.ceil(bound * sample_rate) + sample_rate)
        # 'flt' packed mono: to_ndarray() gives [1, n] float32, already in [-1, 1].
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
        heard: dict[int, int] = {}  # input samples per input rate, for an exact running duration
        try:
            for frame in _frames(container, stream):
                if frame.sample_rate <= 0:
                    raise AudioDecodeError(f"the {fmt} file's {codec} audio has no sample rate")
                heard[frame.sample_rate] = heard.get(frame.sample_rate, 0) + frame.samples
                seconds = sum(n / rate for rate, n in heard.items())
                if max_seconds is not None and seconds > max_seconds:
                    raise AudioTooLong(max_seconds, seconds, declared=False)
                # Output is the samples in decode order; timestamps with gaps or jumps (joined or damaged files)
                # must not make the resampler's filter graph complain about or pad them.
                frame.pts = None
                for out in resampler.resample(frame):
                    _append(samples, out, sample_rate)
            for out in resampler.resample(None):
                _append(samples, out, sample_rate)
        except av.error.FFmpegError as exc:
            raise AudioDecodeError(f"could not decode the {fmt} file's {codec} audio: {exc.strerror}") from exc
    if samples.size == 0:
        raise AudioDecodeError(f"the {fmt} file's {codec} audio stream holds no samples (empty audio)")
    return samples.result()


def _append(samples: _Samples, frame: av.AudioFrame, sample_rate: int) -> None:
    """One resampled frame into the output, refused if it holds NaN or infinity (a float64 sum of float32 values
    cannot overflow, and carries any NaN or infinity through)."""
    chunk = frame.to_ndarray().reshape(-1)
    if not math.isfinite(float(chunk.sum(dtype=np.float64))):
        first = int(np.argmin(np.isfinite(chunk)))
        raise NonFiniteAudio((samples.size + first) / sample_rate)
    samples.append(chunk)
