"""Reports side by side: a metric as a series over prompt length (what a chart plots, measured and
predicted), and saved runs aligned cell by cell with each one's ratio to the first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.bench.report import BenchReport, CellResult

Getter = Callable[[CellResult], float | None]

# name -> (label with its unit, measured value of a cell, the planner's value or None)
METRICS: dict[str, tuple[str, Getter, Getter | None]] = {
    "decode_tok_s": ("Decode (tok/s)", lambda c: c.decode_tok_s, lambda c: c.predicted.decode_tok_s),
    "prefill_tok_s": ("Prefill (tok/s)", lambda c: c.prefill_tok_s, lambda c: c.predicted.prefill_tok_s),
    "ttft_p50_s": ("Time to first token p50 (s)", lambda c: c.ttft_s.p50 if c.ttft_s else None, None),
    "ttft_p99_s": ("Time to first token p99 (s)", lambda c: c.ttft_s.p99 if c.ttft_s else None, None),
    "tpot_p50_s": ("Time per output token p50 (s)", lambda c: c.tpot_s.p50 if c.tpot_s else None, None),
    "e2e_p50_s": ("End-to-end p50 (s)", lambda c: c.e2e_s.p50 if c.e2e_s else None, None),
    "requests_per_s": ("Requests/s", lambda c: c.requests_per_s, None),
}


def _getters(metric: str) -> tuple[Getter, Getter | None]:
    if metric not in METRICS:
        raise KeyError(f"no metric {metric!r}; the metrics are: {', '.join(METRICS)}")
    _, measured, predicted = METRICS[metric]
    return measured, predicted


def series(
    report: BenchReport, metric: str, concurrency: int | None = None, *, predicted: bool = False
) -> list[tuple[int, float]]:
    """(prompt_len, value) at one concurrency (default the lowest), prompt lengths ascending; cells without
    the value are left out. `predicted`: the planner's values instead (empty for metrics it does not predict)."""
    measured, planner = _getters(metric)
    get = planner if predicted else measured
    if get is None or not report.cells:
        return []
    level = concurrency if concurrency is not None else min(c.concurrency for c in report.cells)
    points = []
    for cell in sorted(report.cells, key=lambda c: c.prompt_len):
        value = get(cell) if cell.concurrency == level else None
        if value is not None:
            points.append((cell.prompt_len, float(value)))
    return points


def label(report: BenchReport) -> str:
    """`model · engine · 2026-12-01 18:40` for a legend."""
    when = report.created_at[:16].replace("T", " ")
    return f"{report.model.name} · {report.engine.name} · {when}"


@dataclass(frozen=True)
class CompareRow:
    prompt_len: int
    concurrency: int
    values: tuple[float | None, ...]  # one per report, in the order given
    ratios: tuple[float | None, ...]  # each value ÷ the first report's (None where either is missing)


def compare(reports: list[BenchReport], metric: str) -> list[CompareRow]:
    """Every (prompt_len, concurrency) cell any report has, in order, with each report's value."""
    measured, _ = _getters(metric)
    keys = sorted({(c.prompt_len, c.concurrency) for r in reports for c in r.cells})
    rows = []
    for p, n in keys:
        values = tuple(
            (float(v) if (cell := r.cell(p, n)) is not None and (v := measured(cell)) is not None else None)
            for r in reports
        )
        base = values[0] if values else None
        ratios = tuple(v / base if v is not None and base else None for v in values)
        rows.append(CompareRow(p, n, values, ratios))
    return rows
