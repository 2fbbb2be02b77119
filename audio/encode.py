"""Encode float32 mono audio for /v1/audio/speech: wav, pcm, mp3, flac, opus and aac, whole or as a stream.

Every format has an incremental encoder: `write(samples)` returns the bytes that are ready now and `finish()` the
rest, so a response can go out chunk by chunk while later chunks are still being synthesised; `encode()` is the
same encoder run over the whole clip. The streamed bytes of a format and the whole file decode to the same audio.

- wav: 16-bit PCM in RIFF at the model's rate. A whole file has exact sizes; a stream cannot know them in
  advance and writes 0xFFFFFFFF, which decoders read as "until the end" (as OpenAI's streamed wav does).
- pcm: raw signed 16-bit little-endian samples, no header (OpenAI's pcm is 24 kHz s16le, as Kokoro's is).
- flac: pyflac (libFLAC), 16-bit, lossless. libFLAC writes STREAMINFO first and learns the total samples, frame
  sizes and MD5 of the samples only at the end; a whole file gets them (the final STREAMINFO libFLAC reports is
  written over the first), a stream cannot seek back, so its STREAMINFO says "unknown" (0) for them.
- mp3: LAME through PyAV (libmp3lame in FFmpeg's mp3 muxer), not the lameenc package: lameenc writes no LAME tag,
  so decoders keep the encoder's delay and padding and a clip comes back 62 ms long (measured on a 1.234 s clip at
  24 kHz); the muxer's tag carries them and the whole file decodes to the exact length. A stream gets the tag's
  placeholder only (its values are written at the end, by seeking back), so it decodes up to ~50 ms long.
- opus: libopus in Ogg through PyAV, resampled to 48 kHz (Opus's rate); the Ogg pre-skip makes it exact.
- aac: FFmpeg's AAC encoder in ADTS through PyAV, resampled to 48 kHz: ADTS has no field for the encoder's 1024
  priming samples, and at 48 kHz they and the last frame's padding stay under ~43 ms (at 24 kHz up to ~85 ms).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
# PyAV formats: (muxer, codec, encoder sample rate in Hz, bit rate in bits/s).
_AV_FORMATS = {"mp3": ("mp3", "libmp3lame", None, 64_000), "opus": ("ogg", "libopus", 48_000, 32_000),
               "aac": ("adts", "aac", 48_000, 64_000)}


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float32 samples in [-1, 1] to int16 (clipped, rounded)."""
    return np.round(np.clip(np.asarray(audio, np.float32), -1.0, 1.0) * 32767.0).astype("<i2")


class AudioEncoder:
    """Mono float32 samples in, bytes of one format out, as they become ready."""

    format = ""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.samples = 0  # written so far

    def write(self, audio: np.ndarray) -> bytes:
        """Encode more samples; returns the bytes ready now (possibly none)."""
        self.samples += len(audio)
        return self._write(np.asarray(audio, np.float32).reshape(-1))

    def finish(self) -> bytes:
        """Flush the encoder; returns the last bytes of the stream."""
        return b""

    def whole(self, streamed: bytes) -> bytes:
        """The complete file, given everything write() and finish() returned (formats that fix up their header
        at the end override this)."""
        return streamed

    def _write(self, audio: np.ndarray) -> bytes:
        raise NotImplementedError


class PcmEncoder(AudioEncoder):
    format = "pcm"

    def _write(self, audio: np.ndarray) -> bytes:
        return to_int16(audio).tobytes()


def wav_header(sample_rate: int, n_samples: int | None) -> bytes:
    """A 44-byte RIFF/WAVE header for mono 16-bit PCM; n_samples None: unknown (0xFFFFFFFF sizes)."""
    data = 0xFFFFFFFF if n_samples is None else 2 * n_samples
    riff = 0xFFFFFFFF if n_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16) + b"data" + struct.pack("<I", data))


class WavEncoder(AudioEncoder):
    format = "wav"

    def __init__(self, sample_rate: int) -> None:
        super().__init__(sample_rate)
        self._header_sent = False

    def _write(self, audio: np.ndarray) -> bytes:
        head = b"" if self._header_sent else wav_header(self.sample_rate, None)
        self._header_sent = True
        return head + to_int16(audio).tobytes()

    def finish(self) -> bytes:
        return b"" if self._header_sent else self._write(np.zeros(0, np.float32))

    def whole(self, streamed: bytes) -> bytes:
        return wav_header(self.sample_rate, self.samples) + streamed[44:]


def pack_streaminfo(min_block: int, max_block: int, min_frame: int, max_frame: int, sample_rate: int, channels: int,
                    bits_per_sample: int, total_samples: int, md5: bytes) -> bytes:
    """The 34 bytes of a FLAC STREAMINFO block's body (FLAC spec, RFC 9639 8.2): block sizes in samples (16 bits
    each), frame sizes in bytes (24 bits each, 0: unknown), then rate (20), channels - 1 (3), bits per sample - 1 (5)
    and total samples per channel (36, 0: unknown) in one 64-bit field, and the MD5 of the unencoded samples."""
    packed = (sample_rate << 44) | ((channels - 1) << 41) | ((bits_per_sample - 1) << 36) | total_samples
    return (struct.pack(">HH", min_block, max_block) + min_frame.to_bytes(3, "big") + max_frame.to_bytes(3, "big")
            + struct.pack(">Q", packed) + md5)


class FlacEncoder(AudioEncoder):
    """FLAC through libFLAC's stream encoder. The streamed bytes start with the STREAMINFO libFLAC knows before any
    audio (total samples and MD5 unknown: a stream cannot seek back to fill them in); ``whole()`` writes the final
    one, with the total samples, frame sizes and the MD5 of the signed 16-bit little-endian samples."""

    format = "flac"
    _STREAMINFO = slice(8, 42)  # after "fLaC" and the 4-byte metadata block header; STREAMINFO is always first

    def __init__(self, sample_rate: int) -> None:
        import pyflac

        super().__init__(sample_rate)
        self._out: list[bytes] = []
        self._streaminfo: bytes | None = None  # the final one, once finish() has run
        self._encoder = pyflac.StreamEncoder(write_callback=self._collect, sample_rate=sample_rate,
                                             compression_level=5, metadata_callback=self._final_metadata)

    def _final_metadata(self, metadata: Any) -> None:
        """libFLAC's STREAMINFO at the end of encoding (a C struct valid only during this call)."""
        info = metadata.data.stream_info
        self._streaminfo = pack_streaminfo(info.min_blocksize, info.max_blocksize, info.min_framesize,
                                           info.max_framesize, info.sample_rate, info.channels, info.bits_per_sample,
                                           info.total_samples, bytes(info.md5sum))

    def _collect(self, buffer: bytes, num_bytes: int, num_samples: int, current_frame: int) -> None:
        self._out.append(bytes(buffer))

    def _take(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def _write(self, audio: np.ndarray) -> bytes:
        if len(audio):
            self._encoder.process(to_int16(audio).reshape(-1, 1))
        return self._take()

    def finish(self) -> bytes:
        self._encoder.finish()
        return self._take()

    def whole(self, streamed: bytes) -> bytes:
        if self._streaminfo is None or streamed[:4] != b"fLaC":
            return streamed
        return streamed[:self._STREAMINFO.start] + self._streaminfo + streamed[self._STREAMINFO.stop:]


class _Sink(io.RawIOBase):
    """The file PyAV's muxer writes to: seekable (so the mp3 muxer writes its LAME tag and comes back to fill it
    in), and keeping track of the bytes appended since the last look, which a stream sends."""

    def __init__(self) -> None:
        super().__init__()
        self.file = io.BytesIO()
        self._sent = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self.file.write(bytes(data))

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def take_new(self) -> bytes:
        """Bytes past what was taken before (rewrites of earlier bytes are not sent again)."""
        data = self.file.getbuffer()[self._sent:].tobytes()
        self._sent += len(data)
        return data


class AvEncoder(AudioEncoder):
    """mp3, opus and aac through PyAV (FFmpeg): resampled to the codec's rate, muxed, flushed every packet."""

    def __init__(self, fmt: str, sample_rate: int) -> None:
        import av

        super().__init__(sample_rate)
        self.format = fmt
        muxer, codec, rate, bit_rate = _AV_FORMATS[fmt]
        self._sink = _Sink()
        # flush_packets: hand every packet to the sink at once; Ogg pages of 100 ms instead of up to 1 s.
        options = {"flush_packets": "1", **({"page_duration": "100000"} if muxer == "ogg" else {})}
        self._container = av.open(self._sink, "w", format=muxer, options=options)
        self._stream = self._container.add_stream(codec, rate=rate or sample_rate, layout="mono")
        self._stream.bit_rate = bit_rate
        self._resampler = av.AudioResampler(format=self._stream.codec_context.format.name, layout="mono",
                                            rate=rate or sample_rate)
        self._av = av
        self._closed = False

    def _mux(self, frames: list[Any] | None) -> bytes:
        for frame in frames if frames is not None else [None]:
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.take_new()

    def _write(self, audio: np.ndarray) -> bytes:
        if not len(audio):
            return b""
        frame = self._av.AudioFrame.from_ndarray(audio.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        return self._mux(self._resampler.resample(frame))

    def finish(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        tail = self._mux(self._resampler.resample(None))
        tail += self._mux(None)  # the encoder's last packets
        self._container.close()  # the trailer (and, for mp3, the LAME tag filled in at the start)
        return tail + self._sink.take_new()

    def whole(self, streamed: bytes) -> bytes:
        return self._sink.file.getvalue()


def encoder(fmt: str, sample_rate: int) -> AudioEncoder:
    """A new incremental encoder for one of FORMATS."""
    if fmt in _AV_FORMATS:
        return AvEncoder(fmt, sample_rate)
    classes: dict[str, type[AudioEncoder]] = {"pcm": PcmEncoder, "wav": WavEncoder, "flac": FlacEncoder}
    if fmt not in classes:
        raise ValueError(f"unknown audio format {fmt!r}; the formats are {', '.join(FORMATS)}")
    return classes[fmt](sample_rate)


def encode(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """One whole file of `audio` (float32 mono) in `fmt`."""
    enc = encoder(fmt, sample_rate)
    streamed = enc.write(audio) + enc.finish()
    return enc.whole(streamed)
