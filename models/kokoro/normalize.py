"""English text normalisation for speech: numbers, dates, times, currency, units and abbreviations to words.

espeak-ng reads "$5.20" as "dollar five point two zero" and "1990" as "one thousand nine hundred and ninety";
Kokoro's own front end (misaki) rewrites such tokens before G2P, and so does this module, with plain regular
expressions and a small number speller (no dependency). US and British English differ in dates (11/26 vs 26/11),
"and" inside numbers ("one hundred and five") and a few abbreviations.

    >>> normalize_english("Dr. Smith paid $5.20 on 2026-11-26 at 3:05 pm.")
    'Doctor Smith paid five dollars and twenty cents on November twenty-sixth, twenty twenty-six at three oh five p m.'
"""

from __future__ import annotations

import re
from collections.abc import Callable

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
MONTHS = ("January February March April May June July August September October November December").split()


def _under_1000(n: int, british: bool) -> str:
    words = []
    if n >= 100:
        words.append(f"{_ONES[n // 100]} hundred")
        n %= 100
        if n and british:
            words.append("and")
    if n >= 20:
        words.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def cardinal(n: int, british: bool = False) -> str:
    """125 -> 'one hundred twenty-five' (British: 'one hundred and twenty-five')."""
    if n < 0:
        return "minus " + cardinal(-n, british)
    if n >= 10**15:
        return " ".join(_ONES[int(d)] for d in str(n))  # past trillions: read the digits
    words = []
    for value, name in _SCALES:
        if n >= value:
            words.append(f"{_under_1000(n // value, british)} {name}")
            n %= value
    if n or not words:
        if words and british and n < 100:
            words.append("and")
        words.append(_under_1000(n, british))
    return " ".join(words)


def ordinal(n: int, british: bool = False) -> str:
    """21 -> 'twenty-first'."""
    words = cardinal(n, british)
    head, sep, last = words.rpartition("-") if "-" in words.split(" ")[-1] else words.rpartition(" ")
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def year(n: int, british: bool = False) -> str:
    """1990 -> 'nineteen ninety', 2005 -> 'two thousand five', 1905 -> 'nineteen oh five'."""
    if 2000 <= n <= 2009 or n % 1000 == 0 or not 1000 <= n <= 2999:
        return cardinal(n, british)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{cardinal(high)} hundred"
    return f"{cardinal(high)} {'oh ' + _ONES[low] if low < 10 else cardinal(low)}"


def _digits(text: str) -> str:
    return " ".join(_ONES[int(d)] for d in text)


def _number(text: str, british: bool) -> str:
    """A number as written ('1,234', '3.14', '007') to words."""
    text = text.replace(",", "")
    whole, _, fraction = text.partition(".")
    words = cardinal(int(whole), british) if whole else "zero"
    if len(whole) > 1 and whole.startswith("0"):
        words = _digits(whole)  # 007, zip codes
    if fraction:
        words += " point " + _digits(fraction)
    return words


_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
               "€": ("euro", "euros", "cent", "cents"), "¥": ("yen", "yen", "sen", "sen")}
_SCALE_WORDS = r"(?:hundred|thousand|million|billion|trillion|[kKmMbB]n?)\b"
_SCALE_ABBREV = {"k": "thousand", "m": "million", "mn": "million", "b": "billion", "bn": "billion"}


def _money(match: re.Match[str], british: bool) -> str:
    symbol, amount, scale = match.group("sym"), match.group("amount").replace(",", ""), match.group("scale")
    one, many, cent, cents = _CURRENCIES[symbol]
    if scale:
        scale = _SCALE_ABBREV.get(scale.lower(), scale.lower())
        return f"{_number(amount, british)} {scale} {many}"
    whole, _, fraction = amount.partition(".")
    words = f"{cardinal(int(whole or 0), british)} {one if whole == '1' else many}"
    if fraction and len(fraction) <= 2 and int(fraction):
        coins = int(fraction.ljust(2, "0"))
        words += f" and {cardinal(coins, british)} {cent if coins == 1 else cents}"
    elif fraction and len(fraction) > 2:
        words = f"{_number(amount, british)} {many}"
    return words


def _date(month: int, day: int, year_text: str | None, british: bool) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    said = f"the {ordinal(day)} of {MONTHS[month - 1]}" if british else f"{MONTHS[month - 1]} {ordinal(day)}"
    if year_text:
        said += f"{'' if british else ','} {year(int(year_text), british)}"
    return said


def _time(hours: int, minutes: int, suffix: str | None) -> str:
    said = cardinal(hours)
    if minutes == 0:
        said += "" if suffix else " o'clock"
    elif minutes < 10:
        said += f" oh {_ONES[minutes]}"
    else:
        said += f" {cardinal(minutes)}"
    if suffix:
        said += " " + " ".join(suffix.lower().replace(".", "")) + ("." if suffix.endswith(".") else "")
    return said


# Abbreviations that espeak spells or reads wrongly; applied before numbers, case-sensitive.
_ABBREVIATIONS = [
    (r"\bDr\.(?=\s+[A-Z])", "Doctor"), (r"\bMr\.", "Mister"), (r"\bMrs\.", "Missus"), (r"\bMs\.", "Miz"),
    (r"\bProf\.(?=\s+[A-Z])", "Professor"), (r"\bSt\.(?=\s+[A-Z])", "Saint"), (r"\bJr\.", "Junior"),
    (r"\bSr\.", "Senior"), (r"\bvs\.?(?=\s)", "versus"), (r"\betc\.(?=\s+[a-z])", "etcetera"),
    (r"\betc\.", "etcetera."), (r"\be\.g\.", "for example"), (r"\bi\.e\.", "that is"),
    (r"\bNo\.(?=\s*\d)", "number"), (r"\bapprox\.", "approximately"), (r"\bDept\.", "Department"),
]
_UNITS = {"km": "kilometres", "kg": "kilograms", "cm": "centimetres", "mm": "millimetres", "m": "metres",
          "g": "grams", "mi": "miles", "ft": "feet", "lb": "pounds", "lbs": "pounds", "mph": "miles per hour",
          "km/h": "kilometres per hour", "GB": "gigabytes", "MB": "megabytes", "kB": "kilobytes", "TB": "terabytes",
          "ms": "milliseconds", "s": "seconds", "h": "hours", "Hz": "hertz", "kHz": "kilohertz", "GHz": "gigahertz",
          "°C": "degrees Celsius", "°F": "degrees Fahrenheit", "%": "percent"}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"


class TrackedText:
    """Text under rewriting that remembers, for each character, the span of the original text it came from: a
    replacement's characters all come from the whole span its match covered, so "$5" -> "five dollars" maps every
    character of "five dollars" back to "$5". Caption timestamps use this to name the words the user wrote."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.origin = [(i, i + 1) for i in range(len(text))]

    def _source(self, start: int, end: int) -> tuple[int, int]:
        if start == end:  # an insertion: the point between its neighbours
            point = self.origin[start][0] if start < len(self.origin) else (self.origin[-1][1] if self.origin else 0)
            return point, point
        return self.origin[start][0], self.origin[end - 1][1]

    def sub(self, pattern: str, repl: str | Callable[[re.Match[str]], str]) -> None:
        """re.sub(pattern, repl, text), tracking where each new character came from."""
        pieces: list[str] = []
        origin: list[tuple[int, int]] = []
        pos = 0
        for match in re.finditer(pattern, self.text):
            pieces.append(self.text[pos:match.start()])
            origin.extend(self.origin[pos:match.start()])
            new = repl(match) if callable(repl) else match.expand(repl)
            pieces.append(new)
            origin.extend([self._source(match.start(), match.end())] * len(new))
            pos = match.end()
        pieces.append(self.text[pos:])
        origin.extend(self.origin[pos:])
        self.text, self.origin = "".join(pieces), origin

    def replace(self, old: str, new: str) -> None:
        self.sub(re.escape(old), lambda _: new)

    def strip(self) -> None:
        start = len(self.text) - len(self.text.lstrip())
        end = len(self.text.rstrip())
        self.text, self.origin = self.text[start:end], self.origin[start:end]


def normalize_english(text: str, british: bool = False) -> str:
    """Rewrite numbers, dates, times, money, units and abbreviations as the words a reader would say."""
    return normalize_english_tracked(text, british).text


def normalize_english_tracked(text: str, british: bool = False) -> TrackedText:
    """normalize_english, keeping for each character of the result the span of `text` it came from."""
    tracked = TrackedText(text)
    tracked.replace("\u2018", "'")
    tracked.replace("\u2019", "'")
    tracked.sub(r"[^\S\n]+", " ")
    for pattern, words in _ABBREVIATIONS:
        tracked.sub(pattern, words)
    # ISO dates 2026-11-26; slashed dates 11/26/2026 (US) or 26/11/2026 (British).
    tracked.sub(r"\b(\d{4})-(\d{2})-(\d{2})\b",
                lambda m: _date(int(m[2]), int(m[3]), m[1], british) or m[0])

    def slashed(m: re.Match[str]) -> str:
        a, b = int(m[1]), int(m[2])
        month, day = (b, a) if british else (a, b)
        year_text = m[3] if m[3] is None or len(m[3]) == 4 else str(2000 + int(m[3]))
        return _date(month, day, year_text, british) or m[0]

    tracked.sub(r"\b(\d{1,2})/(\d{1,2})(?:/(\d{4}|\d{2}))?\b", slashed)
    # "November 26" / "26 November" / "Nov 26th"
    month_re = "|".join(MONTHS)
    tracked.sub(rf"\b({month_re}) (\d{{1,2}})(?:st|nd|rd|th)?\b(?!:)",
                lambda m: f"{m[1]} {ordinal(int(m[2]))}" if int(m[2]) <= 31 else m[0])
    tracked.sub(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? ({month_re})\b",
                lambda m: f"the {ordinal(int(m[1]))} of {m[2]}" if int(m[1]) <= 31 else m[0])
    # Times 3:05, 15:30, 7:00 pm.
    tracked.sub(r"\b([01]?\d|2[0-3]):([0-5]\d)(?:\s*([AaPp]\.?[Mm]\.?)(?=\W|$))?",
                lambda m: _time(int(m[1]), int(m[2]), m[3]))
    # Money: $5, $5.20, £3.5m, €1,200.
    tracked.sub(rf"(?P<sym>[$£€¥])\s?(?P<amount>{_NUM})(?:\s?(?P<scale>{_SCALE_WORDS}))?",
                lambda m: _money(m, british))
    # Decades and years: the 1990s, in 1984 (four digits that look like a year, not after other digits).
    tracked.sub(r"\b(1\d|20)(\d0)s\b", lambda m: year(int(m[1] + m[2])).removesuffix("y") + (
        "ies" if year(int(m[1] + m[2])).endswith("y") else "s"))
    tracked.sub(r"(?<![\d.,$£€])\b(1[1-9]\d\d|20\d\d)\b(?![.,]\d|\s?%)", lambda m: year(int(m[1]), british))
    # Ordinals 1st, 22nd, 103rd.
    tracked.sub(r"\b(\d+)(?:st|nd|rd|th)\b", lambda m: ordinal(int(m[1]), british))
    # Numbers with units: 5 km, 20%, 3.5GB, 21°C.
    tracked.sub(rf"({_NUM})\s?({_UNIT_RE})(?![\w])",
                lambda m: f"{_number(m[1], british)} {_singular(_UNITS[m[2]], m[1])}")
    # Ranges 10-20 and negatives -5.
    tracked.sub(r"(?<=\d)\s?[-–]\s?(?=\d)", " to ")
    tracked.sub(rf"(?<![\w-])-({_NUM})\b", lambda m: "minus " + _number(m[1], british))
    tracked.sub(rf"\b({_NUM})\b", lambda m: _number(m[1], british))
    for symbol, word in (("&", " and "), ("+", " plus "), ("@", " at ")):
        tracked.replace(symbol, word)
    tracked.sub(r" {2,}", " ")
    tracked.strip()
    return tracked


def _singular(unit: str, amount: str) -> str:
    """'1 km' is one kilometre, not one kilometres."""
    if amount == "1" and unit.endswith("s") and " " not in unit and unit != "hertz":
        return unit[:-1].replace("feet", "foot")
    return unit.replace("feet", "foot") if amount == "1" else unit
