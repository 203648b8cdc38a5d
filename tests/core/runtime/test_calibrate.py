"""What a finished generation records: its size, and how busy the machine was beside it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.core.engines.base import Chunk, GenerationStats, ModelInfo
from app.core.models.calibration import CalibrationStore
from app.core.models.spec import ModelSpec
from app.core.runtime import calibrate
from app.core.runtime.calibrate import machine_load, record_run
from app.core.runtime.preflight import PreflightResult


def finish(tok_s: float = 40.0) -> Chunk:
    return Chunk(finish_reason="stop", stats=GenerationStats(generated_tokens=32, decode_tok_s=tok_s))


def test_a_run_records_the_models_size_and_the_load(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "machine_load", lambda: (4.5, 0.5))
    store = CalibrationStore(tmp_path / "calibration.json")
    spec = ModelSpec("llama", n_layers=2, block_bytes=[40_000_000, 40_000_000], output_bytes=20_000_000)
    pre = PreflightResult(spec=spec, predicted_decode_tok_s=80.0, backend="cpu")
    record_run(store, pre, ModelInfo(path=Path("m.gguf"), format="gguf", n_ctx=2048), finish(12.0))
    (r,) = store.runs("cpu")
    assert r.model_bytes == spec.bytes_per_token_read
    assert (r.load_per_core, r.own_share) == (4.5, 0.5)
    assert r.busy  # so it does not pull the prediction down
    assert store.correction("cpu", spec.bytes_per_token_read).runs == 0


@pytest.mark.skipif(not hasattr(calibrate.os, "getloadavg"), reason="no load average on this platform")
def test_machine_load_counts_this_process_as_its_own_share(monkeypatch):
    machine_load()  # start a fresh interval
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # this process keeps one core busy
        pass
    monkeypatch.setattr(calibrate.os, "getloadavg", lambda: (2.0, 1.0, 0.5))
    load, own = machine_load()
    cores = calibrate.os.cpu_count() or 1
    assert load == pytest.approx(2.0 / cores)
    assert 0.0 < own <= 1.0
    assert own > 0.1 / cores  # the busy loop: well above an idle process's share


def test_without_a_load_average_nothing_is_judged(monkeypatch):
    monkeypatch.delattr(calibrate.os, "getloadavg", raising=False)
    assert machine_load() == (None, None)
