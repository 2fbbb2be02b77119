"""audio/decode.py: round trips through every container/codec the PyAV build can encode, and the errors.

Inputs are made in the test with PyAV's encoders, so nothing binary is committed. The source is a chirp (a sine
sweeping 200 Hz -> 3.4 kHz) rather than a steady sine: a steady sine correlates with itself at any lag that is a
whole number of periods, so it could not tell a correct decode from a shifted one.
"""

from __future__ import annotations

import io
import wave

import av
import numpy as np
import pytest

from audio.decode import AudioDecodeError, decode_audio, duration_s

SECONDS = 2.0

# (container format, encoder, encoder sample rate, input sample format). Opus only runs at 8/12/16/24/48 kHz;
# 48 kHz also makes the decoder resample, as real uploads do.
FORMATS = [
    ("wav", "pcm_s16le", 16000, "s16"),
    ("flac", "flac", 16000, "s16"),
    ("mp3", "libmp3lame", 16000, "fltp"),
    ("ogg", "libopus", 48000, "flt"),
    ("ipod", "aac", 16000, "fltp"),  # .m4a
    ("mp4", "aac", 16000, "fltp"),
    ("webm", "libopus", 48000, "flt"),
]
# Extra samples a codec may add at 16 kHz output. PyAV's mp4 muxing of FFmpeg's AAC encoder writes no edit list
# that trims the encoder's 1024-sample priming, and the last 1024-sample frame is zero-padded: up to 2048 extra
# samples (measured 1792 for 2 s) that a decoder must keep, since nothing in the file says to drop them.
CODEC_SLACK = {"aac": 2048}


def chirp(sr: int, seconds: float = SECONDS) -> np.ndarray:
    """0.5-amplitude linear chirp, 200 Hz -> 3.4 kHz over ``seconds`` (below every codec's cut-off at 16 kHz)."""
    t = np.arange(int(sr * seconds)) / sr
    return (0.5 * np.sin(2 * np.pi * (200 * t + 1600 * t**2 / seconds))).astype(np.float32)


def encode(fmt: str, codec: str, sr: int, sample_fmt: str, channels: np.ndarray) -> bytes:
    """Encode ``channels`` [n_channels, samples] float32 with PyAV into an in-memory file of format ``fmt``."""
    layout = "mono" if channels.shape[0] == 1 else "stereo"
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as container:
        stream = container.add_stream(codec, rate=sr, layout=layout)
        if sample_fmt == "s16":
            data = (channels.T.reshape(1, -1) * 32767).astype(np.int16)  # packed: [1, samples * channels]
        elif sample_fmt == "flt":
            data = np.ascontiguousarray(channels.T.reshape(1, -1))
        else:  # planar float: [channels, samples]
            data = channels
        frame = av.AudioFrame.from_ndarray(data, format=sample_fmt, layout=layout)
        frame.sample_rate = sr
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buf.getvalue()


def best_correlation(decoded: np.ndarray, source: np.ndarray, max_lag: int) -> float:
    """Largest normalised correlation of ``source`` against ``decoded`` shifted by 0..max_lag samples."""
    n = len(source) - max_lag
    ref = source[:n]
    scores = [
        np.dot(seg, ref) / (np.linalg.norm(seg) * np.linalg.norm(ref) + 1e-12)
        for lag in range(max_lag + 1)
        if len(seg := decoded[lag : lag + n]) == n
    ]
    return float(max(scores))


def has_encoder(codec: str) -> bool:
    try:
        av.codec.Codec(codec, "w")
    except (av.error.FFmpegError, ValueError):  # UnknownCodecError is a ValueError
        return False
    return True


@pytest.mark.parametrize(("fmt", "codec", "sr", "sample_fmt"), FORMATS, ids=[f"{f[0]}-{f[1]}" for f in FORMATS])
def test_round_trip(fmt: str, codec: str, sr: int, sample_fmt: str) -> None:
    if not has_encoder(codec):
        pytest.skip(f"this PyAV build has no {codec} encoder, so no {fmt} file can be made to decode")
    data = encode(fmt, codec, sr, sample_fmt, chirp(sr)[None])
    audio = decode_audio(data)
    assert audio.dtype == np.float32 and audio.ndim == 1
    # Duration within 50 ms of the source (plus what the codec is known to add; see CODEC_SLACK).
    extra = len(audio) - int(16000 * SECONDS)
    assert -800 <= extra <= 800 + CODEC_SLACK.get(codec, 0), f"{fmt}: {extra} samples off"
    assert abs(duration_s(audio) - len(audio) / 16000) < 1e-12
    # Lossy codecs keep this waveform: correlation measured >= 0.9998 for every codec here; 0.99 leaves room for
    # other FFmpeg builds' encoders.
    assert best_correlation(audio, chirp(16000), max_lag=2048) > 0.99
    assert np.abs(audio).max() < 1.0


def test_stereo_44k_is_downmixed_and_resampled() -> None:
    source = chirp(44100)
    # Left carries the chirp, right is silent, so the output's gain is the left channel's downmix weight.
    stereo = np.stack([source, np.zeros_like(source)])
    audio = decode_audio(encode("wav", "pcm_s16le", 44100, "s16", stereo))
    assert abs(len(audio) - 16000 * SECONDS) <= 1  # swresample's rounding of the last output sample
    ref = chirp(16000)
    assert best_correlation(audio, ref, max_lag=64) > 0.99
    # FFmpeg's default stereo -> mono matrix weights each side by 1/sqrt(2) (equal power, not normalised), as
    # `ffmpeg -ac 1` (openai-whisper) and faster-whisper's decode_audio also get; 0.01 covers s16 quantisation.
    gain = np.dot(audio[:30000], ref[:30000]) / np.dot(ref[:30000], ref[:30000])
    assert gain == pytest.approx(2**-0.5, abs=0.01)


def test_other_target_rate() -> None:
    audio = decode_audio(encode("flac", "flac", 16000, "s16", chirp(16000)[None]), sample_rate=24000)
    assert abs(len(audio) - 24000 * SECONDS) <= 1
    assert duration_s(audio, 24000) == pytest.approx(SECONDS, abs=1e-3)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (np.random.default_rng(0).bytes(4096), "not a readable audio file"),
        (b"Meeting notes\nNothing to transcribe here, this is plain text.\n" * 20, "not a readable audio file"),
    ],
    ids=["zero-bytes", "random-bytes", "text-file"],
)
def test_unreadable_input(data: bytes, message: str) -> None:
    with pytest.raises(AudioDecodeError, match=message):
        decode_audio(data)


def test_truncated_upload_keeps_what_decodes() -> None:
    # Half a flac file (an interrupted upload): the frames before the cut decode, the rest is dropped.
    data = encode("flac", "flac", 16000, "s16", chirp(16000)[None])
    audio = decode_audio(data[: len(data) // 2])
    assert 4000 < len(audio) < 32000
    assert best_correlation(audio, chirp(16000)[: len(audio)], max_lag=0) > 0.999
    # mp4 keeps its index (moov) at the end, so a cut file cannot be opened at all: the message says it may be cut.
    data = encode("mp4", "aac", 16000, "fltp", chirp(16000)[None])
    with pytest.raises(AudioDecodeError, match="damaged or cut short"):
        decode_audio(data[: len(data) // 2])


def test_wav_with_no_samples() -> None:
    buf = io.BytesIO()
    # PyAV writes no header until a packet is muxed, so the stdlib writes this valid, empty wav.
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"")
    with pytest.raises(AudioDecodeError, match=r"wav file's pcm_s16le audio stream holds no samples"):
        decode_audio(buf.getvalue())


def test_video_without_audio() -> None:
    if not has_encoder("libvpx"):
        pytest.skip("this PyAV build has no libvpx encoder to make an audio-less webm")
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="webm") as container:
        stream = container.add_stream("libvpx", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    with pytest.raises(AudioDecodeError, match=r"matroska,webm file has no audio stream \(it holds video\)"):
        decode_audio(buf.getvalue())


def test_is_a_value_error() -> None:
    assert issubclass(AudioDecodeError, ValueError)
