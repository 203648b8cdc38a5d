"""The quant probe: its cache (per CPU and llama.cpp build), its driver around a child that may crash or hang,
and one real measurement."""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import pytest

from app.core.bench import quant_probe
from app.core.bench.quant_probe import child_command, describe, measure_quant_speeds, parse_output, type_rate
from app.core.hardware import quant_speed
from app.core.hardware.quant_speed import (
    CACHE_FILE_NAME,
    PROBE_VERSION,
    QuantSpeeds,
    cpu_key,
    host_key,
    measured_cpu_speeds,
    read_entry,
    read_quant_speeds,
    write_quant_speeds,
)
from app.core.models.speed import HOST_COPY_S_PER_ENTRY, T0_TOKEN, T_LAYER_CPU

ROW = {"seconds": 0.01, "bytes_read": 100_000_000, "layers": 8, "vocab": 258, "bandwidth_gbps": 20.0}


def rows_output(*types: str, done: bool = True, layer_s: float | None = None) -> str:
    lines = ["llama.cpp chatter on stdout"]
    if layer_s is not None:
        lines.append(json.dumps({"layer_s": layer_s, "thin_seconds": [0.001, 0.001 + 28 * layer_s]}))
    lines += [json.dumps({"type": t, **ROW, "seconds": 0.01 * (i + 1)}) for i, t in enumerate(types)]
    if done:
        lines.append(json.dumps({"done": True}))
    return "\n".join(lines) + "\n"


def printing(text: str) -> list[str]:
    """A fake child that prints `text` and exits 0."""
    return [sys.executable, "-c", f"import sys; sys.stdout.write({text!r})"]


def test_cache_is_keyed_per_cpu_and_build(tmp_path):
    key = cpu_key("AMD EPYC", ["avx2", "fma"], "0.3.16|libggml-cpu.so:100")
    write_quant_speeds(tmp_path, key, QuantSpeeds({"Q4_K": 11.3, "F16": 17.2}, 8e-5, 20.0, time.time()))
    got = read_quant_speeds(tmp_path, key)
    assert got.rates_gbps == {"Q4_K": 11.3, "F16": 17.2} and got.layer_s == 8e-5
    assert read_quant_speeds(tmp_path, cpu_key("AMD EPYC", ["fma", "avx2"], "0.3.16|libggml-cpu.so:100")) is not None
    assert read_quant_speeds(tmp_path, cpu_key("Intel Xeon", ["avx2", "fma"], "0.3.16|libggml-cpu.so:100")) is None
    assert read_quant_speeds(tmp_path, cpu_key("AMD EPYC", ["avx2", "fma", "amx"], "0.3.16|libggml-cpu.so:100")) is None
    assert read_quant_speeds(tmp_path, cpu_key("AMD EPYC", ["avx2", "fma"], "0.3.17|libggml-cpu.so:120")) is None


def test_the_build_key_changes_with_the_native_library(tmp_path, monkeypatch):
    lib = tmp_path / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (lib / "libggml-cpu.so").write_bytes(b"x" * 10)

    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path / "llama_cpp")])
    monkeypatch.setattr(quant_speed.importlib.util, "find_spec", lambda name: spec)
    before = quant_speed.llamacpp_build()
    (lib / "libggml-cpu.so").write_bytes(b"x" * 11)  # rebuilt with other kernels
    assert quant_speed.llamacpp_build() != before


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        json.dumps({"k": {"version": PROBE_VERSION, "rates_gbps": "fast"}}),
        json.dumps({"k": {"version": PROBE_VERSION - 1, "speeds": {"Q4_K": 0.8}}}),  # an older probe's meaning
        json.dumps({"k": {"version": PROBE_VERSION - 1, "rates_gbps": {"Q4_K": 11.0}}}),
        json.dumps({"k": {"version": PROBE_VERSION, "rates_gbps": {"Q4_K": -1, "F16": True}}}),
    ],
)
def test_a_corrupt_or_foreign_cache_is_ignored(tmp_path, text):
    (tmp_path / CACHE_FILE_NAME).write_text(text)
    assert read_quant_speeds(tmp_path, "k") is None
    assert read_entry(tmp_path, "k") is None


def test_the_speed_model_sees_this_hosts_entry_for_its_simd_only(tmp_path):
    simd = ("avx2", "fma")
    assert measured_cpu_speeds(simd, tmp_path) is None  # nothing measured yet
    write_quant_speeds(tmp_path, host_key(simd), QuantSpeeds({"Q4_K": 11.0}, None, 20.0, time.time()))
    assert measured_cpu_speeds(simd, tmp_path).rates_gbps == {"Q4_K": 11.0}
    assert measured_cpu_speeds(("avx512f",), tmp_path) is None  # another machine's profile
    (tmp_path / CACHE_FILE_NAME).write_text("garbage")  # replaced: read again, and ignored
    assert measured_cpu_speeds(simd, tmp_path) is None


def test_an_implausible_layer_cost_in_the_cache_is_dropped_not_the_rates(tmp_path):
    entry = {"version": PROBE_VERSION, "rates_gbps": {"Q4_K": 11.0}, "layer_s": 3.0}
    (tmp_path / CACHE_FILE_NAME).write_text(json.dumps({"k": entry}))
    got = read_quant_speeds(tmp_path, "k")
    assert got.rates_gbps == {"Q4_K": 11.0} and got.layer_s is None


def test_type_rate_is_what_makes_the_speed_models_cpu_term_reproduce_the_probe():
    layer_s = 9e-5
    rate = type_rate(ROW, layer_s)
    fixed = T0_TOKEN + ROW["layers"] * layer_s + ROW["vocab"] * HOST_COPY_S_PER_ENTRY
    assert ROW["bytes_read"] / (rate * 1e9) + fixed == pytest.approx(ROW["seconds"], rel=1e-9)
    assert type_rate({**ROW, "seconds": 0.02}, layer_s) < rate / 2  # twice the time, less than half the rate
    # A token faster than the fixed terms alone (a disturbed table value): reads still take a share of it.
    assert type_rate({**ROW, "seconds": 1e-4}, layer_s) == pytest.approx(ROW["bytes_read"] / 0.25e-4 / 1e9)


def test_parse_output_wants_the_end_marker():
    assert set(parse_output(rows_output("Q4_K", "F16")).rates_gbps) == {"Q4_K", "F16"}
    assert parse_output(rows_output("Q4_K", done=False)) is None  # cut off: a partial run is no measurement
    assert parse_output("") is None


def test_the_measured_layer_cost_is_kept_and_taken_out_of_each_types_time():
    with_layers = parse_output(rows_output("Q4_K", layer_s=2e-4))
    without = parse_output(rows_output("Q4_K"))
    assert with_layers.layer_s == pytest.approx(2e-4) and without.layer_s is None
    assert with_layers.rates_gbps["Q4_K"] == pytest.approx(type_rate(ROW, 2e-4))
    assert without.rates_gbps["Q4_K"] == pytest.approx(type_rate(ROW, T_LAYER_CPU))
    assert with_layers.rates_gbps["Q4_K"] > without.rates_gbps["Q4_K"]  # more fixed time, less left for reads
    assert "0.200 ms per layer" in describe(with_layers)
    # A negative slope (the deeper thin model timed faster: a disturbed run) is no per-layer cost.
    assert parse_output(rows_output("Q4_K", layer_s=-1e-5)).layer_s is None


def test_good_output_is_parsed_and_cached(tmp_path):
    result = measure_quant_speeds(tmp_path, command=printing(rows_output("Q4_K", "Q8_0")))
    assert result is not None and set(result.rates_gbps) == {"Q4_K", "Q8_0"}
    assert result.rates_gbps["Q4_K"] == pytest.approx(type_rate({**ROW, "seconds": 0.01}))
    assert result.rates_gbps["Q8_0"] < result.rates_gbps["Q4_K"]  # same bytes, twice the time
    assert (result.load_per_core is not None) == hasattr(os, "getloadavg")  # how quiet it was, for the record
    # Cached for this CPU: a later call does not run the child (this one would crash).
    again = measure_quant_speeds(tmp_path, command=[sys.executable, "-c", "import os; os.abort()"])
    assert again is not None and again.rates_gbps == result.rates_gbps
    assert read_quant_speeds(tmp_path, host_key()).rates_gbps == result.rates_gbps


def test_a_child_killed_by_a_signal_is_no_measurement(tmp_path):
    # It printed a complete-looking answer first: a crash still voids it.
    code = f"import os, signal, sys; sys.stdout.write({rows_output('Q4_K')!r}); sys.stdout.flush(); "
    crash = [sys.executable, "-c", code + "os.kill(os.getpid(), signal.SIGSEGV)"]
    assert measure_quant_speeds(tmp_path, command=crash) is None
    assert isinstance(read_entry(tmp_path, host_key()), float)  # the failure is remembered ...
    marker = tmp_path / "ran"
    second = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    assert measure_quant_speeds(tmp_path, command=second) is None
    assert not marker.exists()  # ... so the next start does not crash again


def test_a_failure_is_retried_after_a_while_and_on_refresh(tmp_path, monkeypatch):
    assert measure_quant_speeds(tmp_path, command=[sys.executable, "-c", "raise SystemExit(3)"]) is None
    good = printing(rows_output("Q4_K"))
    assert measure_quant_speeds(tmp_path, refresh=True, command=good) is not None
    monkeypatch.setattr(quant_probe, "RETRY_FAILED_AFTER_S", 0.0)
    assert measure_quant_speeds(tmp_path / "other", command=[sys.executable, "-c", "raise SystemExit(3)"]) is None
    assert measure_quant_speeds(tmp_path / "other", command=good) is not None


def test_a_child_that_hangs_is_killed_at_the_timeout(tmp_path):
    hang = [sys.executable, "-c", f"import sys, time; sys.stdout.write({rows_output('Q4_K')!r}); time.sleep(60)"]
    t0 = time.perf_counter()
    assert measure_quant_speeds(tmp_path, command=hang, timeout_s=1.0) is None
    assert time.perf_counter() - t0 < 30  # killed, not waited for
    assert isinstance(read_entry(tmp_path, host_key()), float)


def test_the_background_start_does_nothing_once_measured(tmp_path):
    measure_quant_speeds(tmp_path, command=printing(rows_output("Q4_K")))
    assert quant_probe.start_quant_probe(tmp_path) is None


@pytest.mark.slow
def test_a_real_probe_measures_one_type_in_a_child(tmp_path):
    pytest.importorskip("gguf")
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    small = {"n_embd": 256, "n_ff": 512, "n_layer": 2, "n_head": 4, "n_head_kv": 4}
    work = tmp_path / "work"
    work.mkdir()
    result = measure_quant_speeds(tmp_path, command=child_command(work, ["Q4_0"], 1, small), timeout_s=60)
    assert result is not None, "the probe child failed (see the log)"
    assert set(result.rates_gbps) == {"Q4_0"}
    row = result.detail["Q4_0"]
    assert row["layers"] == 2 and row["bytes_read"] > 0 and row["seconds"] > 0
    assert 0 < result.rates_gbps["Q4_0"] < 10_000
    # The thin models' per-layer slope: a few µs to a few ms a layer on any CPU, never negative.
    assert result.layer_s is not None and 1e-6 < result.layer_s < 5e-3, result.detail.get("layers")
    assert not list(work.glob("probe-Q4_0.gguf"))  # each quantized model is deleted once measured


def test_work_left_by_an_app_that_exited_mid_probe_is_removed(tmp_path):
    stale, fresh = tmp_path / f"{quant_probe.WORK_PREFIX}old", tmp_path / f"{quant_probe.WORK_PREFIX}now"
    for folder in (stale, fresh):
        folder.mkdir()
        (folder / "probe-F16.gguf").write_bytes(b"x")
    old = time.time() - 3 * quant_probe.TIMEOUT_S
    os.utime(stale, (old, old))
    measure_quant_speeds(tmp_path, command=printing(rows_output("Q4_K")))
    assert not stale.exists() and fresh.exists()  # a running probe's folder is left alone


def test_the_background_probe_waits_for_a_quiet_machine(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(quant_probe, "measure_quant_speeds", lambda cache_dir: calls.append(cache_dir))
    monkeypatch.setattr(quant_probe, "machine_busy", lambda: True)
    quant_probe.start_quant_probe(tmp_path, wait_quiet_s=0).join(10)
    assert calls == []  # busy throughout: left to a later start
    monkeypatch.setattr(quant_probe, "machine_busy", lambda: False)
    quant_probe.start_quant_probe(tmp_path, wait_quiet_s=0).join(10)
    assert calls == [tmp_path]


def test_a_probe_that_dies_with_extra_buffer_types_measures_again_without_them(tmp_path, monkeypatch):
    """A child killed by a signal (AMX buffers on some Xeons) is retried once with extra buffer types off."""
    seen: list[bool] = []

    def fake_run(command, timeout_s):
        extra = json.loads(command[-1])["extra_bufts"]
        seen.append(extra)
        if extra:
            return quant_probe.ChildResult(-11, "", "Segmentation fault")
        return quant_probe.ChildResult(0, rows_output("Q4_K"), "")

    monkeypatch.setattr(quant_probe, "run_child", fake_run)
    monkeypatch.setattr(quant_probe, "_extra_bufts_survive", lambda: True)
    result = measure_quant_speeds(tmp_path)
    assert result is not None and "Q4_K" in result.rates_gbps
    assert seen == [True, False]
    # Where the native canary already turned them off, the first child goes without them.
    seen.clear()
    monkeypatch.setattr(quant_probe, "_extra_bufts_survive", lambda: False)
    assert measure_quant_speeds(tmp_path, refresh=True) is not None and seen == [False]
