"""audio/subtitles.py: timestamps, SRT and WebVTT, read back by strict parsers (no subtitle library is installed,
so the parsers here follow the formats' grammar: SubRip's numbered blocks, WebVTT's header and cue timings).
The parsers are shared with tests/server/test_transcriptions.py, which reads the server's srt and vtt with them.
"""

from __future__ import annotations

import re

import pytest

from audio.subtitles import format_timestamp, write_srt, write_vtt

_SRT_TIME = r"(\d{2,}):([0-5]\d):([0-5]\d),(\d{3})"
_SRT_TIMING = re.compile(rf"^{_SRT_TIME} --> {_SRT_TIME}$")
_VTT_TIME = r"(?:(\d{2,}):)?([0-5]\d):([0-5]\d)\.(\d{3})"
_VTT_TIMING = re.compile(rf"^{_VTT_TIME} --> {_VTT_TIME}(?: .*)?$")


def _seconds(hours: str | None, minutes: str, seconds: str, millis: str) -> float:
    return int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds) + int(millis) / 1000


def parse_srt(text: str) -> list[tuple[float, float, str]]:
    """Cues of a SubRip file; AssertionError on anything the format does not allow (numbers must run 1, 2, ...,
    every block is number, timing, one or more text lines, and blocks end with a blank line)."""
    assert text == "" or text.endswith("\n\n"), "an SRT file ends with a blank line after its last cue"
    cues = []
    for index, block in enumerate(filter(None, text.split("\n\n")), start=1):
        lines = block.split("\n")
        assert len(lines) >= 3, f"cue {index} needs a number, a timing and text: {block!r}"
        assert lines[0] == str(index), f"cue numbers run from 1 without gaps: got {lines[0]!r}, want {index}"
        timing = _SRT_TIMING.match(lines[1])
        assert timing, f"bad SRT timing line {lines[1]!r}"
        start, end = _seconds(*timing.groups()[:4]), _seconds(*timing.groups()[4:])
        assert start <= end, f"cue {index} ends before it starts: {lines[1]!r}"
        assert all(line.strip() for line in lines[2:]), f"cue {index} has an empty text line"
        cues.append((start, end, "\n".join(lines[2:])))
    return cues


def parse_vtt(text: str) -> list[tuple[float, float, str]]:
    """Cues of a WebVTT file (header, optional cue identifiers, timings, text); AssertionError otherwise."""
    assert text.startswith("WEBVTT") and text[6:7] in ("\n", " ", "\t"), "a WebVTT file starts with WEBVTT"
    header, _, body = text.partition("\n\n")
    assert "-->" not in header, "the header block holds no cue"
    cues = []
    for block in filter(None, body.split("\n\n")):
        lines = block.split("\n")
        if not _VTT_TIMING.match(lines[0]):
            lines = lines[1:]  # a cue identifier
        timing = _VTT_TIMING.match(lines[0]) if lines else None
        assert timing, f"bad WebVTT cue {block!r}"
        start, end = _seconds(*timing.groups()[:4]), _seconds(*timing.groups()[4:])
        assert start <= end, f"cue ends before it starts: {lines[0]!r}"
        assert len(lines) >= 2 and all(line.strip() for line in lines[1:]), f"cue without text: {block!r}"
        cues.append((start, end, "\n".join(lines[1:])))
    return cues


@pytest.mark.parametrize(("seconds", "srt", "vtt_short"), [
    (0.0, "00:00:00,000", "00:00.000"),
    (2.5, "00:00:02,500", "00:02.500"),
    (59.9996, "00:01:00,000", "01:00.000"),  # rounds to the millisecond and carries into the minutes
    (3661.042, "01:01:01,042", "01:01:01.042"),
    (360000.0, "100:00:00,000", "100:00:00.000"),  # hours do not wrap
])
def test_format_timestamp(seconds: float, srt: str, vtt_short: str) -> None:
    assert format_timestamp(seconds, decimal_marker=",") == srt
    assert format_timestamp(seconds, always_include_hours=False) == vtt_short
    assert format_timestamp(seconds) == srt.replace(",", ".")


def test_negative_timestamp_is_an_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_timestamp(-0.5)


CUES = [(0.0, 2.48, " Hello there."), (2.48, 2.48, " Zero length stays."), (3.0, 2.0, " Ends early -->  oops. "),
        (4.0, 5.0, "   "), (3725.25, 3727.0, " Late\n\n and on two lines.")]


def test_srt_round_trip() -> None:
    text = write_srt(CUES)
    assert text.startswith("1\n00:00:00,000 --> 00:00:02,480\nHello there.\n\n")
    assert parse_srt(text) == [(0.0, 2.48, "Hello there."), (2.48, 2.48, "Zero length stays."),
                               (3.0, 3.0, "Ends early ->  oops."), (3725.25, 3727.0, "Late\n and on two lines.")]


def test_vtt_round_trip() -> None:
    text = write_vtt(CUES)
    assert text.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.480\nHello there.\n\n")
    assert [c[2] for c in parse_vtt(text)] == ["Hello there.", "Zero length stays.", "Ends early ->  oops.",
                                               "Late\n and on two lines."]
    assert parse_vtt(text)[-1][:2] == (3725.25, 3727.0)


def test_no_cues() -> None:
    assert write_srt([]) == "" and parse_srt("") == []
    assert write_vtt([(0.0, 1.0, " ")]) == "WEBVTT\n\n" and parse_vtt("WEBVTT\n\n") == []


def test_parsers_are_strict() -> None:
    with pytest.raises(AssertionError):
        parse_srt("2\n00:00:00,000 --> 00:00:01,000\nx\n\n")  # numbering must start at 1
    with pytest.raises(AssertionError):
        parse_srt("1\n00:00:00.000 --> 00:00:01.000\nx\n\n")  # SRT uses a comma
    with pytest.raises(AssertionError):
        parse_vtt("00:00.000 --> 00:01.000\nx\n\n")  # no header
    with pytest.raises(AssertionError):
        parse_vtt("WEBVTT\n\n00:00:01.000 --> 00:00:00.000\nx\n\n")  # ends before it starts
