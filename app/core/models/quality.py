"""Quality ranking of quantizations by KL divergence from the full-precision model (quants.json)."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from app.core.resources import load_json


@lru_cache(maxsize=1)
def _ladder() -> dict[str, dict]:
    return {e["quant"].upper(): e for e in load_json("quants.json")["ladder"]}


def floor_kld() -> float:
    """KLD of the lowest quant Hearth recommends before it lowers the context instead (Q3_K_M)."""
    return _ladder()[load_json("quants.json")["floor_quant"]]["kld"]


def kld_for_bpw(bpw: float) -> float:
    """Interpolate the KLD curve in log space; used for EXL2/MLX, whose bpw is a free number."""
    curve = load_json("quants.json")["bpw_curve"]
    if bpw <= curve[0][0]:
        return curve[0][1]
    if bpw >= curve[-1][0]:
        return curve[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if x0 <= bpw <= x1:
            t = (bpw - x0) / (x1 - x0)
            return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
    return curve[-1][1]


def kld_for(quant: str | None, bpw: float | None = None) -> float | None:
    """Expected KLD for a GGUF quant label, else for a bits-per-weight figure."""
    if quant:
        entry = _ladder().get(quant.upper())
        if entry:
            return entry["kld"]
    return kld_for_bpw(bpw) if bpw else None


def quality_label(kld: float | None) -> str:
    if kld is None:
        return "unknown"
    if kld <= 0.002:
        return "near-lossless"
    if kld <= 0.015:
        return "excellent"
    if kld <= 0.04:
        return "good"
    if kld <= 0.09:
        return "fair"
    if kld <= 0.2:
        return "degraded"
    return "poor"
