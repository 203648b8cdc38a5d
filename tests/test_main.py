"""The composition root's background measurements."""

from __future__ import annotations

from app.core.bench import quant_probe
from app.core.paths import app_paths
from app.core.settings import Settings
from app.main import QUANT_PROBE_DELAY_S, start_quant_probe_if_wanted


def test_the_quant_probe_starts_with_the_app_unless_measuring_is_off(monkeypatch):
    calls = []

    def fake_start(cache_dir, *, delay_s):
        calls.append((cache_dir, delay_s))
        return None

    monkeypatch.setattr(quant_probe, "start_quant_probe", fake_start)
    paths = app_paths()
    start_quant_probe_if_wanted(paths, Settings(measure_bandwidth_on_start=False))
    assert calls == []
    start_quant_probe_if_wanted(paths, Settings())
    assert calls == [(paths.cache, QUANT_PROBE_DELAY_S)]  # after start-up has settled, into the cache dir
