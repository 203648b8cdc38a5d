"""probe_hardware(): every sub-probe, time-bounded, assembled into one HardwareProfile.

Slow or fragile probes (NVML, AMD / Intel GPUs, engines, Apple, the bandwidth test) each run on a daemon thread:
a probe that hangs is abandoned with a warning, and cannot keep the process from exiting.
"""

from __future__ import annotations

import logging
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.hardware import adapters
from app.core.hardware import apple as apple_mod
from app.core.hardware import bandwidth as bw_mod
from app.core.hardware.cpu import probe_cpu, read_sysctl
from app.core.hardware.drm import probe_drm
from app.core.hardware.engines import LLAMACPP, MLX, probe_engines
from app.core.hardware.memory import probe_memory
from app.core.hardware.nvidia import probe_nvidia
from app.core.hardware.profile import (
    AmdIntelInfo,
    BandwidthInfo,
    CpuInfo,
    EngineAvailability,
    HardwareProfile,
    MemoryInfo,
)

logger = logging.getLogger(__name__)

# Bandwidth test budget: long enough for a stable figure, short enough for a first launch.
MEASURE_BUDGET_S = 0.2
_MAX_MEASURE_THREADS = 8


class _Task:
    """Runs `fn` on a daemon thread; `wait()` gives its result or None plus a warning."""

    def __init__(self, name: str, fn: Callable[[], Any]) -> None:
        self.name, self._fn = name, fn
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name=f"hearth-probe-{name}", daemon=True).start()

    def _run(self) -> None:
        try:
            self._result = self._fn()
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    def wait(self, deadline: float, warnings: list[str]) -> Any:
        if not self._done.wait(max(0.0, deadline - time.perf_counter())):
            warnings.append(f"{self.name} probe did not answer in time; left unknown")
            logger.warning("%s probe timed out", self.name)
            return None
        if self._error is not None:
            warnings.append(f"{self.name} probe failed: {self._error}")
            logger.warning("%s probe failed", self.name, exc_info=self._error)
            return None
        return self._result


def _guarded(name: str, fn: Callable[[], Any], default: Any, warnings: list[str]) -> Any:
    try:
        return fn()
    except Exception as exc:
        warnings.append(f"{name} probe failed: {exc}")
        logger.warning("%s probe failed", name, exc_info=True)
        return default


def _os_names() -> tuple[str, str]:
    system = platform.system()
    if system == "Darwin":
        return "macOS", platform.mac_ver()[0]
    if system == "Linux":
        try:
            pretty = platform.freedesktop_os_release().get("PRETTY_NAME", "")
        except OSError:
            pretty = ""
        return "Linux", f"{pretty} (kernel {platform.release()})" if pretty else platform.release()
    return system, platform.version()


def probe_amd_intel() -> AmdIntelInfo:
    """AMD and Intel GPUs the way this OS can tell without vendor SDKs (Apple Silicon has none to find)."""
    if sys.platform.startswith("linux"):
        return probe_drm()
    if sys.platform == "win32":
        return adapters.probe_windows()
    if sys.platform == "darwin" and platform.machine() == "x86_64":
        return adapters.probe_macos()
    return AmdIntelInfo(reason="AMD and Intel GPUs are not looked for on this platform")


def _default_cache_dir() -> Path | None:
    try:
        from app.core.paths import app_paths

        return app_paths().cache
    except Exception as exc:
        logger.warning("no cache dir for the bandwidth test: %s", exc)
        return None


def _measure_threads(cpu: CpuInfo) -> int:
    return max(1, min(cpu.physical_cores or cpu.logical_cores or 1, _MAX_MEASURE_THREADS))


def probe_hardware(
    *,
    cache_dir: Path | None = None,
    measure_bandwidth: bool = True,
    refresh_bandwidth: bool = False,
    nvidia_provider: Any = None,
    amd_intel_probe: Callable[[], AmdIntelInfo] | None = None,
    timeout_s: float = 2.0,
) -> HardwareProfile:
    """Probe this machine. Never raises; failed or slow probes add to `warnings`.

    `cache_dir` holds the measured-bandwidth cache (default: Hearth's cache dir). With
    `measure_bandwidth=False` only a cached figure is reported. `timeout_s` bounds each
    probe; a first bandwidth measurement gets at least its own budget on top. `amd_intel_probe` replaces
    the AMD / Intel GPU probe (tests point it at a fake sysfs tree).
    """
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    warnings: list[str] = []
    profile = HardwareProfile(arch=platform.machine())
    profile.os, profile.os_version = _guarded("os", _os_names, (platform.system(), ""), warnings)

    nvidia_task = _Task("NVIDIA", lambda: probe_nvidia(nvidia_provider))
    amd_intel_task = _Task("AMD/Intel GPU", amd_intel_probe or probe_amd_intel)
    engines_task = _Task("engines", probe_engines)
    sysctl: dict[str, str] | None = None
    if sys.platform == "darwin":
        sysctl = _guarded("sysctl", read_sysctl, {}, warnings)
    apple_task = _Task("Apple Silicon", lambda: apple_mod.probe_apple(sysctl)) if sys.platform == "darwin" else None

    profile.cpu = _guarded("CPU", lambda: probe_cpu(sysctl=sysctl), CpuInfo(), warnings)
    profile.memory = _guarded("memory", probe_memory, MemoryInfo(), warnings)
    if profile.cpu.arch:
        profile.arch = profile.cpu.arch

    profile.nvidia = nvidia_task.wait(deadline, warnings) or profile.nvidia
    if not profile.nvidia.reason and not profile.nvidia.available:
        profile.nvidia.reason = "NVIDIA probe did not finish"
    profile.amd_intel = amd_intel_task.wait(deadline, warnings) or AmdIntelInfo(reason="AMD/Intel probe did not finish")
    profile.engines = engines_task.wait(deadline, warnings) or [
        # Still importing (or failed): the task keeps running and fills the per-process cache.
        EngineAvailability(name, available=False, reason="not probed yet (engine import still running)")
        for name in (LLAMACPP, MLX)
    ]
    if apple_task is not None:
        profile.apple = apple_task.wait(deadline, warnings)

    profile.bandwidth = _bandwidth(profile, cache_dir, measure_bandwidth, refresh_bandwidth, deadline, warnings)
    profile.warnings = warnings
    profile.probe_ms = (time.perf_counter() - t0) * 1000.0
    logger.info("hardware probed in %.0f ms (%d warnings)", profile.probe_ms, len(warnings))
    return profile


def _bandwidth(
    profile: HardwareProfile,
    cache_dir: Path | None,
    measure: bool,
    refresh: bool,
    deadline: float,
    warnings: list[str],
) -> BandwidthInfo:
    info = BandwidthInfo()
    if profile.apple is not None and profile.apple.bandwidth_gbps:
        info.cpu_table_gbps = profile.apple.bandwidth_gbps  # unified memory: the CPU shares it
    elif profile.apple is None:
        info.note = "rated RAM bandwidth needs the DIMM speed and channel count, which are not probed"
    cache_dir = cache_dir if cache_dir is not None else _default_cache_dir()
    brand, total = profile.cpu.brand, profile.memory.total_bytes
    if not measure or not refresh:
        hit = _guarded(
            "bandwidth cache",
            lambda: bw_mod.cached_cpu_bandwidth(cache_dir, brand, total) if cache_dir is not None else None,
            None,
            warnings,
        )
        if hit is not None:
            info.cpu_measured_gbps, info.measured_at = hit
            return info
    if not measure:
        return info
    threads = _measure_threads(profile.cpu)
    task = _Task(
        "bandwidth",
        lambda: bw_mod.cpu_read_bandwidth(
            cache_dir,
            brand,
            total,
            refresh=True,
            measure=lambda: bw_mod.measure_read_bandwidth(budget_s=MEASURE_BUDGET_S, threads=threads),
        ),
    )
    # A first measurement may overrun the shared deadline; give it its own budget plus slack.
    result = task.wait(max(deadline, time.perf_counter() + MEASURE_BUDGET_S * 5), warnings)
    if result is not None:
        info.cpu_measured_gbps, info.measured_at, _ = result
    return info
