"""Human-readable numbers, shared by the CLI and the GUI so both say the same thing."""

from __future__ import annotations

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
