"""Calibration per model size, and runs measured on a busy machine left out."""

from __future__ import annotations

import json

import pytest

from app.core.models.calibration import MODEL_VERSION, CalibrationStore, Correction, SpeedRun

MB = 1_000_000


def run(ratio: float, size: int = 0, **kw) -> SpeedRun:
    return SpeedRun(
        backend="cpu", model="m", predicted_decode=100.0, measured_decode=100.0 * ratio, model_bytes=size, **kw
    )


def store_with(tmp_path, *runs: SpeedRun) -> CalibrationStore:
    store = CalibrationStore(tmp_path / "calibration.json")
    for r in runs:
        store.record(r)
    return store


def test_the_correction_follows_the_runs_nearest_in_size(tmp_path):
    # A small model misses by one factor (per-layer costs), a large one by another (bandwidth).
    store = store_with(tmp_path, *[run(0.6, 100 * MB) for _ in range(3)], *[run(0.9, 2000 * MB) for _ in range(3)])
    assert store.correction("cpu", 100 * MB).decode == pytest.approx(0.6)
    assert store.correction("cpu", 2000 * MB).decode == pytest.approx(0.9)
    assert store.correction("cpu", 120 * MB).decode == pytest.approx(0.6, rel=0.02)  # near the small ones
    assert store.correction("cpu", 120 * MB).runs == 3
    assert store.correction("cpu", 2000 * MB).runs == 3


def test_far_from_every_run_the_correction_fades(tmp_path):
    store = store_with(tmp_path, run(0.5, 100 * MB), run(0.5, 110 * MB))
    near = store.correction("cpu", 100 * MB).decode
    far = store.correction("cpu", 100 * MB * 64).decode  # six doublings from the nearest run
    assert near == pytest.approx(0.5)
    assert near < far < 1.0


def test_without_a_size_every_run_counts_alike(tmp_path):
    store = store_with(tmp_path, run(0.6, 100 * MB), run(0.8, 2000 * MB), run(1.0))
    assert store.correction("cpu").decode == pytest.approx(0.8)  # the plain median, as before sizes


def test_runs_on_a_busy_machine_are_ignored(tmp_path):
    quiet = run(0.95, 100 * MB, load_per_core=1.0, own_share=0.95)  # our own decode threads
    busy = run(0.15, 100 * MB, load_per_core=4.5, own_share=0.5)  # load 9 on 2 cores, half of it ours
    assert quiet.busy is False and busy.busy is True
    store = store_with(tmp_path, quiet, busy, busy)
    assert store.correction("cpu", 100 * MB).decode == pytest.approx(0.95)
    assert store.correction("cpu").decode == pytest.approx(0.95)
    assert len(store.runs("cpu")) == 3  # kept in the file, for the record
    assert store_with(tmp_path / "only-busy", busy).correction("cpu", 100 * MB) == Correction()


def test_old_runs_without_the_new_fields_are_read(tmp_path):
    path = tmp_path / "calibration.json"
    old = {"backend": "cpu", "model": "a.gguf", "predicted_decode": 100.0, "measured_decode": 70.0, "at": 1.0}
    path.write_text(json.dumps({"runs": [{**old, "model_version": MODEL_VERSION}]}))
    store = CalibrationStore(path)
    (r,) = store.runs("cpu")
    assert r.model_bytes == 0 and r.load_per_core is None and not r.busy
    assert store.correction("cpu", 100 * MB).decode == pytest.approx(0.7)  # no sized run: all alike
    store.record(run(0.9, 100 * MB))
    assert store.correction("cpu", 100 * MB).decode == pytest.approx(0.9)  # a sized run now decides
    assert store.correction("cpu").decode == pytest.approx(0.8)


def test_prefill_is_corrected_per_size_too(tmp_path):
    small = run(0.6, 100 * MB, predicted_prefill=1000.0, measured_prefill=500.0)
    large = run(0.9, 3000 * MB, predicted_prefill=100.0, measured_prefill=100.0)
    store = store_with(tmp_path, small, large)
    assert store.correction("cpu", 100 * MB).prefill == pytest.approx(0.5, rel=1e-3)
    assert store.correction("cpu", 3000 * MB).prefill == pytest.approx(1.0, rel=1e-3)
