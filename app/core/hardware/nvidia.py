"""NVIDIA GPUs through NVML (nvidia-ml-py, module `pynvml`), with an injectable provider for tests."""

from __future__ import annotations

import logging
from typing import Any

from app.core.hardware.bandwidth import lookup_gpu_bandwidth
from app.core.hardware.profile import GpuInfo, NvidiaInfo
from app.core.native import import_native

logger = logging.getLogger(__name__)

NO_DRIVER_REASON = "none found (no NVIDIA driver is installed)"
NO_BINDINGS_REASON = "none found (nvidia-ml-py is not installed)"
# NVML_ERROR_* values that mean "there is no usable NVIDIA driver here", not a fault.
_NO_DRIVER_VALUES = {9: "driver not loaded", 12: "library not found"}
_NO_DRIVER_NAMES = ("LibraryNotFound", "DriverNotLoaded")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _is_no_driver(exc: BaseException) -> bool:
    name = type(exc).__name__
    return getattr(exc, "value", None) in _NO_DRIVER_VALUES or any(n in name for n in _NO_DRIVER_NAMES)


def _describe(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    return f"NVML error: {msg}"


def cuda_version_text(v: int) -> str:
    """NVML's integer CUDA driver version (12040) → "12.4"."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _default_provider() -> Any | None:
    try:
        pynvml = import_native("pynvml")  # lazy: absent or driverless machines must not pay for it
    except ImportError:
        return None
    return pynvml


def _read_device(nvml: Any, index: int) -> GpuInfo:
    """One GPU; a failing call leaves its field at the default and says so in `note`."""
    gpu = GpuInfo(index=index, name=f"GPU {index}")
    problems: list[str] = []
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        gpu.note = f"cannot open this GPU: {_describe(exc)}"
        return gpu
    try:
        gpu.name = _text(nvml.nvmlDeviceGetName(handle))
    except Exception as exc:
        problems.append(f"name: {_describe(exc)}")
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        gpu.memory_total_bytes, gpu.memory_free_bytes = int(mem.total), int(mem.free)
        gpu.memory_used_bytes = int(mem.used)
    except Exception as exc:
        problems.append(f"memory: {_describe(exc)}")
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        gpu.compute_capability = f"{major}.{minor}"
    except Exception as exc:
        problems.append(f"compute capability: {_describe(exc)}")
    bw = lookup_gpu_bandwidth(gpu.name)
    gpu.bandwidth_gbps = bw.gbps
    if bw.gbps is None:
        problems.append(bw.note)
    gpu.note = "; ".join(problems)
    return gpu


def probe_nvidia(provider: Any | None = None) -> NvidiaInfo:
    """NVIDIA driver, CUDA version and GPUs. Never raises: problems land in `reason` / `GpuInfo.note`.

    `provider` is `pynvml` or any object with the same functions (nvmlInit, nvmlShutdown,
    nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion_v2, nvmlDeviceGetCount,
    nvmlDeviceGetHandleByIndex, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo,
    nvmlDeviceGetCudaComputeCapability).
    """
    nvml = provider if provider is not None else _default_provider()
    if nvml is None:
        return NvidiaInfo(available=False, reason=NO_BINDINGS_REASON)
    try:
        nvml.nvmlInit()
    except Exception as exc:
        if _is_no_driver(exc):
            logger.debug("NVML unavailable: %s", exc)
            return NvidiaInfo(available=False, reason=NO_DRIVER_REASON)
        logger.warning("NVML init failed: %s", exc)
        return NvidiaInfo(available=False, reason=_describe(exc))
    try:
        return _probe_initialised(nvml)
    except Exception as exc:
        logger.warning("NVML probe failed: %s", exc)
        return NvidiaInfo(available=False, reason=_describe(exc))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            logger.debug("nvmlShutdown failed: %s", exc)


def _probe_initialised(nvml: Any) -> NvidiaInfo:
    info = NvidiaInfo()
    try:
        info.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception as exc:
        logger.debug("driver version unknown: %s", exc)
    try:
        get_cuda = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion
        info.cuda_version = cuda_version_text(int(get_cuda()))
    except Exception as exc:
        logger.debug("CUDA driver version unknown: %s", exc)
    count = int(nvml.nvmlDeviceGetCount())
    info.gpus = [_read_device(nvml, i) for i in range(count)]
    info.available = bool(info.gpus)
    troubled = [g for g in info.gpus if g.note.startswith("cannot open") or "NVML error" in g.note]
    if not info.gpus:
        info.reason = "the NVIDIA driver is loaded but reports no GPU"
    elif troubled:
        info.reason = f"{len(troubled)} of {len(info.gpus)} GPUs could not be read fully: " + "; ".join(
            f"GPU {g.index}: {g.note}" for g in troubled
        )
    return info
