"""Decode uploaded audio (any container and codec FFmpeg reads) to mono float32 at a fixed sample rate, in memory.

PyAV opens the bytes through an io.BytesIO, decodes the first audio stream and runs every frame through one
``av.AudioResampler`` (FFmpeg's swresample) that downmixes to mono and converts to the target rate, as
faster-whisper's ``decode_audio`` does, so Hearth and its reference see the same samples. Nothing touches the disk.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import numpy as np

DEFAULT_SAMPLE_RATE = 16000  # Hz, what Whisper takes


class AudioDecodeError(ValueError):
    """The upload is not decodable audio; the message says why (and names the container format when known)."""


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


def decode_audio(data: bytes, *, sample_rate: int = DEFAULT_SAMPLE_RATE) -> np.ndarray:
    """Decode ``data`` (flac, mp3, mp4/m4a, mpeg/mpga, ogg/opus, wav, webm, ...) to mono float32 [samples].

    Channels are downmixed and the audio resampled to ``sample_rate`` by FFmpeg's swresample. Samples are in
    [-1, 1] for mono input. They are not clipped, to stay sample-for-sample with faster-whisper and ``ffmpeg -ac 1``:
    lossy codecs can overshoot slightly, and FFmpeg's default stereo downmix weights each side by 1/sqrt(2) (equal
    power), so loud identical channels can reach sqrt(2).

    Raises:
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
        # 'flt' packed mono: to_ndarray() gives [1, n] float32, already in [-1, 1].
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
        chunks: list[np.ndarray] = []
        try:
            for frame in _frames(container, stream):
                # Output is the samples in decode order; timestamps with gaps or jumps (joined or damaged files)
                # must not make the resampler's filter graph complain about or pad them.
                frame.pts = None
                chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(frame))
            chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(None))
        except av.error.FFmpegError as exc:
            raise AudioDecodeError(f"could not decode the {fmt} file's {codec} audio: {exc.strerror}") from exc
    audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if audio.size == 0:
        raise AudioDecodeError(f"the {fmt} file's {codec} audio stream holds no samples (empty audio)")
    return audio.astype(np.float32, copy=False)
