"""Series for charts and saved runs compared cell by cell."""

from __future__ import annotations

import pytest

from app.core.bench.compare import METRICS, compare, label, series
from app.core.bench.report import BenchReport, CellResult, Prediction
from app.core.bench.stats import summarize


def _report(decode_by_cell: dict[tuple[int, int], float], name: str = "m") -> BenchReport:
    cells = [
        CellResult(
            prompt_len=p,
            concurrency=c,
            requests=1,
            completed=1,
            prompt_tokens=p,
            output_tokens=8,
            ttft_s=summarize([0.1 * p / 100]),
            tpot_s=summarize([0.01]),
            e2e_s=summarize([0.2]),
            prefill_tok_s=1000.0,
            decode_tok_s=d,
            requests_per_s=1.0,
            aggregate_tok_s=8.0,
            predicted=Prediction(decode_tok_s=50.0, prefill_tok_s=900.0),
        )
        for (p, c), d in decode_by_cell.items()
    ]
    return BenchReport.model_validate(
        {
            "id": name,
            "created_at": "2026-12-01T18:40:00+00:00",
            "hearth_version": "0",
            "duration_s": 1.0,
            "model": {"name": name},
            "weights": {},
            "engine": {"kind": "host", "name": "llama.cpp"},
            "hardware": {},
            "workload": {},
            "warmup_requests": 0,
            "runs": 1,
            "cells": [c.model_dump() for c in cells],
            "memory": {"target_ctx": 4096},
        }
    )


def test_series_at_the_lowest_concurrency_measured_and_predicted():
    r = _report({(512, 1): 40.0, (128, 1): 45.0, (128, 4): 10.0})
    assert series(r, "decode_tok_s") == [(128, 45.0), (512, 40.0)]
    assert series(r, "decode_tok_s", 4) == [(128, 10.0)]
    assert series(r, "decode_tok_s", predicted=True) == [(128, 50.0), (512, 50.0)]
    assert series(r, "ttft_p50_s", predicted=True) == []  # the planner does not predict it
    assert series(r, "ttft_p50_s") == [(128, pytest.approx(0.128)), (512, pytest.approx(0.512))]
    with pytest.raises(KeyError, match="decode_tok_s"):
        series(r, "nope")
    assert set(METRICS) >= {"decode_tok_s", "prefill_tok_s", "ttft_p50_s"}


def test_compare_aligns_cells_and_gives_ratios_to_the_first():
    a = _report({(128, 1): 40.0, (512, 1): 30.0}, "a")
    b = _report({(128, 1): 60.0, (2048, 1): 20.0}, "b")
    rows = compare([a, b], "decode_tok_s")
    assert [(r.prompt_len, r.values, r.ratios) for r in rows] == [
        (128, (40.0, 60.0), (1.0, 1.5)),
        (512, (30.0, None), (1.0, None)),
        (2048, (None, 20.0), (None, None)),
    ]
    assert label(a) == "a · llama.cpp · 2026-12-01 18:40"
