"""probe_hardware() on this machine, with injected failures, and its time budget."""

from __future__ import annotations

import importlib.util
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from app.core.hardware import HardwareProfile, probe_hardware
from app.core.hardware import probe as probe_mod
from app.core.hardware.bandwidth import CACHE_FILE_NAME

NO_NVIDIA_DRIVER = shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists()


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory) -> Path:
    """A cache dir holding this machine's measured bandwidth; also imports the engines once."""
    cache = tmp_path_factory.mktemp("hw-cache")
    probe_hardware(cache_dir=cache, timeout_s=30.0)
    return cache


class HangingNvml:
    """nvmlInit blocks until released: stands in for a wedged driver."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def nvmlInit(self):  # noqa: N802
        self.release.wait(10)
        raise RuntimeError("released")

    def nvmlShutdown(self):  # noqa: N802
        pass


def test_real_probe(warm_cache):
    p = probe_hardware(cache_dir=warm_cache)
    assert p.warnings == []
    total = psutil.virtual_memory().total
    assert abs(p.memory.total_bytes - total) <= 0.01 * total
    assert p.os and p.arch == platform.machine()
    assert p.cpu.brand and p.cpu.logical_cores
    if sys.platform.startswith("linux") and " avx2 " in Path("/proc/cpuinfo").read_text():
        assert "avx2" in p.cpu.simd
    if NO_NVIDIA_DRIVER:
        assert not p.nvidia.available and p.nvidia.gpus == [] and p.nvidia.reason
    if sys.platform != "darwin":
        assert p.apple is None
    assert [e.name for e in p.engines] == ["llama.cpp", "mlx"]
    if importlib.util.find_spec("llama_cpp") is not None:
        llama = p.engine("llama.cpp")
        assert llama.available and llama.backend == ("Metal" if sys.platform == "darwin" else "CPU")
    assert p.bandwidth.cpu_measured_gbps and p.bandwidth.cpu_measured_gbps > 0.5
    assert p.probe_ms > 0


def test_second_probe_is_fast(warm_cache):
    t0 = time.perf_counter()
    p = probe_hardware(cache_dir=warm_cache)
    wall = time.perf_counter() - t0
    assert wall < 1.5  # ~tens of ms here; loose because the machine is shared
    assert p.probe_ms <= wall * 1000 + 1


def test_bandwidth_cache_reused_and_refreshed(warm_cache):
    cached = probe_hardware(cache_dir=warm_cache).bandwidth
    assert probe_hardware(cache_dir=warm_cache, measure_bandwidth=False).bandwidth.measured_at == cached.measured_at
    fresh = probe_hardware(cache_dir=warm_cache, refresh_bandwidth=True).bandwidth
    assert fresh.measured_at > cached.measured_at and fresh.cpu_measured_gbps > 0
    assert probe_hardware(cache_dir=warm_cache).bandwidth.measured_at == fresh.measured_at


def test_no_measurement_without_cache(tmp_path):
    p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False)
    assert p.bandwidth.cpu_measured_gbps is None
    assert not (tmp_path / CACHE_FILE_NAME).exists()


class OneH200:
    """Just enough of pynvml for one GPU (test_hw_nvidia.py covers the provider in depth)."""

    def __getattr__(self, name):
        answers = {
            "nvmlSystemGetDriverVersion": "570.1",
            "nvmlSystemGetCudaDriverVersion_v2": 12080,
            "nvmlDeviceGetCount": 1,
            "nvmlDeviceGetHandleByIndex": 0,
            "nvmlDeviceGetName": "NVIDIA H200",
            "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=141 * 2**30, free=140 * 2**30, used=2**30),
            "nvmlDeviceGetCudaComputeCapability": (9, 0),
        }
        return lambda *_: answers.get(name)


def test_injected_nvidia_provider_reaches_the_profile(tmp_path):
    p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False, nvidia_provider=OneH200())
    assert p.nvidia.available and p.nvidia.cuda_version == "12.8"
    assert [(g.name, g.compute_capability, g.bandwidth_gbps) for g in p.gpus] == [("NVIDIA H200", "9.0", 4800)]
    assert p.gpus[0].memory_free_bytes == 140 * 2**30


def test_hanging_probe_times_out_with_a_warning(tmp_path):
    nvml = HangingNvml()
    try:
        t0 = time.perf_counter()
        p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False, nvidia_provider=nvml, timeout_s=0.3)
        assert time.perf_counter() - t0 < 1.5
    finally:
        nvml.release.set()
    assert any("NVIDIA" in w and "in time" in w for w in p.warnings)
    assert not p.nvidia.available and p.nvidia.reason
    assert p.memory.total_bytes > 0  # the other probes still answered


def test_failing_probe_becomes_a_warning(tmp_path, monkeypatch):
    def broken(**_):
        raise OSError("cpuinfo vanished")

    monkeypatch.setattr(probe_mod, "probe_cpu", broken)
    p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False)
    assert any("CPU probe failed" in w and "cpuinfo vanished" in w for w in p.warnings)
    assert p.cpu.brand == "" and p.memory.total_bytes > 0


def test_profile_round_trips_through_dict(warm_cache):
    p = probe_hardware(cache_dir=warm_cache)
    assert HardwareProfile.from_dict(p.to_dict()) == p


def test_slow_engine_probe_is_reported_not_awaited(tmp_path, monkeypatch):
    release = threading.Event()

    def slow_engines():
        release.wait(10)
        return []

    monkeypatch.setattr(probe_mod, "probe_engines", slow_engines)
    try:
        p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False, timeout_s=0.3)
    finally:
        release.set()
    assert any("engines" in w for w in p.warnings)
    assert [(e.name, e.available) for e in p.engines] == [("llama.cpp", False), ("mlx", False)]
    assert all("not probed yet" in e.reason for e in p.engines)
