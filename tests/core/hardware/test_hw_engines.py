"""Engine availability: llama.cpp and MLX."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from app.core.hardware import engines
from app.core.hardware.engines import backend_from_system_info, probe_engines, probe_llamacpp, probe_mlx
from tests.helpers import require_llama_cpp


@pytest.fixture
def fresh_engine_cache():
    saved = dict(engines._cache)
    engines._cache.clear()
    yield
    engines._cache.clear()
    engines._cache.update(saved)


@pytest.mark.parametrize(
    ("info", "offload", "backend"),
    [
        (b"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | OPENMP = 1 | REPACK = 1 | ", False, "CPU"),
        ("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : AVX2 = 1 | ", True, "CUDA"),
        ("Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | DOTPROD = 1 | ", True, "Metal"),
        ("Vulkan : ... | CPU : AVX2 = 1 | ", True, "Vulkan"),
        ("CUDA : ARCHS = 890 | CPU : AVX2 = 1 | ", False, "CPU"),  # compiled in, but no device to offload to
    ],
)
def test_backend_from_system_info(info, offload, backend):
    assert backend_from_system_info(info, offload) == backend


def test_llamacpp_on_this_machine():
    require_llama_cpp()
    e = probe_llamacpp()
    assert e.available and e.name == "llama.cpp"
    assert e.version and e.version[0].isdigit()
    assert e.backend == "CPU" and e.gpu_offload is False


def test_missing_llamacpp_is_a_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    e = probe_llamacpp()
    assert not e.available and e.reason == "llama-cpp-python is not installed"


def test_missing_mlx_is_a_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("mlx") else real(name, *a)
    )
    e = probe_mlx()
    assert not e.available and e.reason == "mlx is not installed"


def test_mlx_on_this_machine():
    e = probe_mlx()
    if importlib.util.find_spec("mlx") is None:
        assert not e.available and e.reason
        return
    assert e.available and e.version
    if sys.platform != "darwin":
        assert e.backend == "CPU" and not e.gpu_offload
        assert "CPU only" in e.note


def test_probe_engines_is_cached_per_process(monkeypatch, fresh_engine_cache):
    calls = []

    def fake(name):
        def probe():
            calls.append(name)
            return engines.EngineAvailability(name, available=True, version="1")

        return probe

    monkeypatch.setattr(engines, "probe_llamacpp", fake("llama.cpp"))
    monkeypatch.setattr(engines, "probe_mlx", fake("mlx"))
    assert engines.cached_engines() is None
    first = probe_engines()
    second = probe_engines()
    assert [e.name for e in first] == ["llama.cpp", "mlx"] and first == second
    assert calls == ["llama.cpp", "mlx"]
    second[0].available = False  # callers get copies, not the cache itself
    assert engines.cached_engines()[0].available
    probe_engines(refresh=True)
    assert calls == ["llama.cpp", "mlx", "llama.cpp", "mlx"]


def test_prewarm_fills_the_cache(monkeypatch, fresh_engine_cache):
    monkeypatch.setattr(
        engines, "probe_llamacpp", lambda: engines.EngineAvailability("llama.cpp", available=False, reason="x")
    )
    monkeypatch.setattr(engines, "probe_mlx", lambda: engines.EngineAvailability("mlx", available=False, reason="y"))
    engines.prewarm_engines().join(5)
    assert [e.reason for e in engines.cached_engines()] == ["x", "y"]


def test_what_the_canary_turned_off_reaches_the_profile_and_the_planner(tmp_path, monkeypatch):
    """The engine probe reads the canary's store for this build: extra buffer types off means no repack copy."""
    from app.core.hardware.engines import probe_llamacpp
    from app.core.hardware.native_checks import CheckRecord, NativeCheckStore, fingerprint_of
    from app.core.hardware.profile import CpuInfo, HardwareProfile
    from app.core.models.devices import machine_from_profile

    lib = require_llama_cpp()
    store = tmp_path / "checks.json"
    monkeypatch.setenv("HEARTH_NATIVE_CHECKS", str(store))
    assert probe_llamacpp().turned_off == []
    off = {"extra_bufts": False, "flash_attn": False, "gpu_offload": False}
    checks = NativeCheckStore(store)
    checks.put(fingerprint_of(lib), CheckRecord("F32,Q4_0", {**off, "extra_bufts": True}, False, "died with SIGSEGV"))
    checks.put(fingerprint_of(lib), CheckRecord("F32,Q4_0", off, True))
    engine = probe_llamacpp()
    assert engine.turned_off == ["extra_bufts"]
    profile = HardwareProfile(cpu=CpuInfo(simd=["avx2"]), engines=[engine])
    assert machine_from_profile(profile).repack is False
    profile.engines = []
    assert machine_from_profile(profile).repack is True
