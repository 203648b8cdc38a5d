"""bench/speed_scoreboard.py's per-source overhead: fitted on a source's own Llama-2-7B Q4_0 rows, added to
that source's other decode rows only, never negative."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("hearth_bench_speed_scoreboard", ROOT / "bench" / "speed_scoreboard.py")
assert _spec is not None and _spec.loader is not None
sb = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sb
_spec.loader.exec_module(sb)

MODELS = json.loads((ROOT / "bench" / "data" / "speed_models.json").read_text(encoding="utf-8"))
SRC = "https://github.com/someone/bench/blob/abc/README.md"


def row(split, device, tok_s, *, backend="cuda", model="llama2-7b", quant="Q4_0", test="tg128", source=SRC):
    cores = 40 if backend == "metal" else None
    return sb.Row(split, backend, device, cores, model, quant, test, tok_s, source, "")


def slower_by(r, extra_s):
    """The row with its measured tok/s set to the model's prediction plus `extra_s` per token."""
    r.tok_s = 1 / (1 / sb.predict(r, MODELS) + extra_s)
    return r


def test_the_overhead_is_the_median_gap_of_the_sources_own_rows_and_never_negative():
    rows = [
        slower_by(row("fit-source", "NVIDIA GeForce RTX 4090", 0), 1e-3),
        slower_by(row("fit-source", "NVIDIA GeForce RTX 3090", 0), 2e-3),
        slower_by(row("fit-source", "NVIDIA GeForce RTX 4080", 0), 4e-3),
        slower_by(row("fit-source", "NVIDIA H100 PCIe", 0), 3e-3),  # HBM: a group of its own
        slower_by(row("fit-source", "Apple M3 Max", 0, backend="metal"), -1e-3),  # faster than predicted
        slower_by(row("held", "NVIDIA GeForce RTX 4090", 0), 9e-3),  # held-out rows never fit it
    ]
    over = sb.source_overheads(rows, MODELS)
    repo = SRC.split("/blob/")[0]
    assert over[(repo, "nvidia_consumer")] == pytest.approx(2e-3)
    assert over[(repo, "nvidia_datacenter")] == pytest.approx(3e-3)
    assert over[(repo, "metal")] == 0.0


def test_the_overhead_reaches_the_sources_decode_rows_only():
    repo = SRC.split("/blob/")[0]
    over = {(repo, "nvidia_consumer"): 2e-3}
    mine = row("held", "NVIDIA GeForce RTX 4090", 1, model="llama3-8b", quant="Q4_K_M", test="tg512")
    other = row("held", "NVIDIA GeForce RTX 4090", 1, model="llama3-8b", quant="Q4_K_M", test="tg512", source="x")
    prefill = row("held", "NVIDIA GeForce RTX 4090", 1, test="pp512")
    bare = sb.predict(mine, MODELS)
    assert 1 / sb.predict(mine, MODELS, over) - 1 / bare == pytest.approx(2e-3)
    assert sb.predict(other, MODELS, over) == pytest.approx(bare)
    assert sb.predict(prefill, MODELS, over) == pytest.approx(sb.predict(prefill, MODELS))
