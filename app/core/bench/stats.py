"""Percentiles of a handful of measurements: linear interpolation between the closest ranks (numpy's
default), so p50 ≤ p95 ≤ p99 always holds and one sample gives that sample for all three."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field


class Percentiles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    p50: float
    p95: float
    p99: float
    mean: float
    n: int = Field(ge=1)


def percentile(values: list[float], p: float) -> float:
    """The `p`-th percentile (0..100) of `values`; ValueError when there are none."""
    if not values:
        raise ValueError("no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(values: Iterable[float | None]) -> Percentiles | None:
    """p50/p95/p99 and the mean of the finite values; None when there is none."""
    clean = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not clean:
        return None
    return Percentiles(
        p50=percentile(clean, 50),
        p95=percentile(clean, 95),
        p99=percentile(clean, 99),
        mean=sum(clean) / len(clean),
        n=len(clean),
    )


def median(values: Iterable[float | None]) -> float | None:
    clean = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return percentile(clean, 50) if clean else None
