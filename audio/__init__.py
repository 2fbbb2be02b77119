"""Audio in and out: decoding uploads (PyAV) and Whisper's log-mel features."""

from audio.decode import AudioDecodeError, AudioTooLong, NonFiniteAudio, decode_audio, duration_s
from audio.features import log_mel_spectrogram, mel_filters, pad_or_trim

__all__ = ["AudioDecodeError", "AudioTooLong", "NonFiniteAudio", "decode_audio", "duration_s", "log_mel_spectrogram",
           "mel_filters", "pad_or_trim"]
