"""Human-readable numbers, shared by the CLI and the GUI so both say the same thing."""

from __future__ import annotations

import time
from datetime import datetime

GiB = 1024**3
MiB = 1024**2


def fmt_bytes(n: int | float | None, digits: int = 1) -> str:
    if n is None:
        return "unknown"
    n = float(n)
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.{digits}f} {unit}"
    return f"{int(n)} B"


def fmt_gbps(v: float | None) -> str:
    return "unknown" if v is None else f"{v:,.0f} GB/s" if v >= 10 else f"{v:.1f} GB/s"


def fmt_count(n: int) -> str:
    """Downloads and likes as the Hub shows them: 950, 12.3k, 4.1M."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def fmt_n(n: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one: "1 token", "2,048 tokens"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def fmt_ago(when: datetime | float | None, never: str = "-", now: float | None = None) -> str:
    """When, in words: "today", "12 d ago", or the date (local time) once two months old; `never` for None."""
    if when is None:
        return never
    ts = when.timestamp() if isinstance(when, datetime) else float(when)
    days = ((time.time() if now is None else now) - ts) / 86400
    if days < 1:
        return "today"
    if days < 60:
        return f"{int(days)} d ago"
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def fmt_eta(seconds: float | None) -> str:
    """Time left in words ("2 min 05 s left"); "" when unknown."""
    if seconds is None:
        return ""
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s left"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s left"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min left"
