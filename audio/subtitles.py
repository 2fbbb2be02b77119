"""Subtitle files from timed text: SubRip (.srt) and WebVTT (.vtt), as Whisper's writers and OpenAI's API make them.

A cue is (start, end, text) in seconds. Both formats number or list the cues in order, one blank line after each;
text is stripped, and an arrow ("-->") inside it becomes "->" so it cannot be read as a cue timing line, as
openai-whisper's writers do. Cues whose text is empty after stripping are left out (a subtitle with no text is
not a cue players show, and SRT numbering must stay consecutive).

    write_srt([(0.0, 2.5, " Hello.")])  ->  "1\\n00:00:00,000 --> 00:00:02,500\\nHello.\\n\\n"
    write_vtt([(0.0, 2.5, " Hello.")])  ->  "WEBVTT\\n\\n00:00:00.000 --> 00:00:02.500\\nHello.\\n\\n"
"""

from __future__ import annotations

from collections.abc import Iterable

Cue = tuple[float, float, str]  # (start s, end s, text)


def format_timestamp(seconds: float, *, decimal_marker: str = ".", always_include_hours: bool = True) -> str:
    """HH:MM:SS.mmm (SRT uses "," as the decimal marker); hours may be left out when zero (WebVTT allows it).

    Rounded to the nearest millisecond; negative times (never valid in a subtitle) raise ValueError.
    """
    if seconds < 0:
        raise ValueError(f"a subtitle timestamp cannot be negative (got {seconds} s)")
    milliseconds = round(seconds * 1000.0)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    secs, milliseconds = divmod(milliseconds, 1000)
    head = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal_marker}{milliseconds:03d}"


def _cues(cues: Iterable[Cue]) -> Iterable[Cue]:
    """The cues with text, cleaned; end never before start (a zero-length cue stays, as Whisper writes it)."""
    for start, end, text in cues:
        # A blank line would end the cue early: keep the lines, drop the empty ones between them.
        text = "\n".join(line for line in text.strip().replace("-->", "->").split("\n") if line.strip())
        if text:
            yield start, max(start, end), text


def write_srt(cues: Iterable[Cue]) -> str:
    """SubRip: a number from 1, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, the text, a blank line; per cue."""
    blocks = []
    for index, (start, end, text) in enumerate(_cues(cues), start=1):
        timing = f"{format_timestamp(start, decimal_marker=',')} --> {format_timestamp(end, decimal_marker=',')}"
        blocks.append(f"{index}\n{timing}\n{text}\n\n")
    return "".join(blocks)


def write_vtt(cues: Iterable[Cue]) -> str:
    """WebVTT: the `WEBVTT` header and a blank line, then `HH:MM:SS.mmm --> HH:MM:SS.mmm`, the text and a blank line
    per cue (an audio with no speech gives the header alone, which is a valid, empty WebVTT file)."""
    blocks = ["WEBVTT\n\n"]
    for start, end, text in _cues(cues):
        blocks.append(f"{format_timestamp(start)} --> {format_timestamp(end)}\n{text}\n\n")
    return "".join(blocks)
