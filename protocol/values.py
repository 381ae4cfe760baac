"""Plain values read from text (query strings, headers, flags, parameter values), strictly and the same everywhere.

Python's own readers are too generous for input from outside: ``str.isdigit()`` is true for ``"²"``, ``int()``
takes ``"١٢"`` and ``"8_000"``, and ``float()`` takes ``"nan"`` and ``"infinity"``. These accept ASCII only.
"""

from __future__ import annotations

import re

# The largest id or count any store of ours holds: a signed 64-bit integer (PostgreSQL bigint, SQLite INTEGER).
MAX_INT64 = 2**63 - 1
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)")


def parse_int(text: str, *, minimum: int = 0, maximum: int = MAX_INT64) -> int:
    """A whole number in ASCII digits within the bounds; ``ValueError`` with a message otherwise."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"{text[:40]!r} is not a whole number")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ValueError(f"{value} is outside {minimum}..{maximum}")
    return value


def is_whole_number(text: str) -> bool:
    """Go's ``strconv.Atoi`` syntax (what Coder checks number parameters with): optional sign, ASCII digits."""
    return _WHOLE.fullmatch(text) is not None


def parse_decimal(text: str) -> float:
    """A finite decimal number (``12``, ``-1.5``, ``2e3``); no NaN, infinities, underscores or non-ASCII digits."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"{text[:40]!r} is not a number")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]!r} is too large")
    return value


def parse_duration(text: str) -> int:
    """``"90"``, ``"90s"``, ``"5m"``, ``"24h"`` or ``"7d"`` to seconds; ``ValueError`` on anything else."""
    text = text.strip().lower()
    number, unit = (text, "s") if text[-1:].isascii() and text[-1:].isdigit() else (text[:-1], text[-1:])
    if unit not in DURATION_UNITS or not _WHOLE.fullmatch(number) or number.startswith(("+", "-")):
        raise ValueError(f"{text!r} is not a duration like 90s, 5m, 24h or 7d")
    return int(number) * DURATION_UNITS[unit]


def parse_size(text: str) -> int:
    """``"0"``, ``"1048576"``, ``"500MiB"``, ``"1.5GiB"`` or ``"2GB"`` to bytes (KiB, MiB, GiB, TiB count in 1024s;
    kB, MB, GB, TB in 1000s); ``ValueError`` on anything else."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in SIZE_UNITS:
        raise ValueError(f"{text[:40]!r} is not a size like 500MiB, 1GiB or 0")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def format_size(size: int) -> str:
    """Bytes for people: ``"512 B"``, ``"1.5 MiB"``, ``"1 GiB"``."""
    value, unit = float(size), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}".replace(".0 ", " ")
