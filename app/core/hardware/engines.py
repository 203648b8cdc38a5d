"""Which inference engines this Python can run, and on what backend.

Importing llama_cpp loads a native library (hundreds of ms the first time), so results are
cached per process: a module cannot be un-imported, and its backend cannot change.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
import threading

from app.core.hardware.profile import EngineAvailability
from app.core.native import import_native

logger = logging.getLogger(__name__)

LLAMACPP = "llama.cpp"
MLX = "mlx"
# Markers llama.cpp's system info prints for each compiled-in GPU backend, checked in this order.
_BACKEND_MARKERS = (("CUDA", "CUDA"), ("METAL", "Metal"), ("VULKAN", "Vulkan"), ("HIP", "ROCm"), ("SYCL", "SYCL"))

_lock = threading.Lock()
_cache: dict[str, EngineAvailability] = {}


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def backend_from_system_info(info: str | bytes, gpu_offload: bool) -> str:
    """The GPU backend llama_print_system_info() names ("CUDA", "Metal", "Vulkan", "ROCm", "SYCL"), else "CPU"."""
    text = (info.decode("utf-8", "replace") if isinstance(info, bytes) else info).upper()
    if gpu_offload:
        for marker, name in _BACKEND_MARKERS:
            if marker in text or (name == "Metal" and "MTL" in text):
                return name
    return "CPU"


def probe_llamacpp() -> EngineAvailability:
    if importlib.util.find_spec("llama_cpp") is None:
        return EngineAvailability(LLAMACPP, available=False, reason="llama-cpp-python is not installed")
    try:
        llama_cpp = import_native("llama_cpp")  # native library load; see module docstring
    except Exception as exc:
        logger.warning("llama_cpp import failed: %s", exc)
        return EngineAvailability(LLAMACPP, available=False, reason=f"llama-cpp-python failed to load: {exc}")
    version = getattr(llama_cpp, "__version__", None) or _dist_version("llama-cpp-python", "llama_cpp_python")
    try:
        offload = bool(llama_cpp.llama_supports_gpu_offload())
        backend = backend_from_system_info(llama_cpp.llama_print_system_info(), offload)
    except Exception as exc:
        logger.warning("llama_cpp backend query failed: %s", exc)
        return EngineAvailability(
            LLAMACPP, available=True, version=version, backend="CPU", note=f"backend unknown: {exc}"
        )
    return EngineAvailability(
        LLAMACPP,
        available=True,
        version=version,
        backend=backend,
        gpu_offload=offload,
        turned_off=_turned_off(llama_cpp),
    )


def _turned_off(llama_cpp) -> list[str]:
    """What the native canary turned off for this build here (read from its store; nothing runs)."""
    from app.core.hardware.native_checks import records_here, turned_off_here

    try:
        records = records_here(llama_cpp)
    except Exception as exc:  # no cache dir, an unreadable store: the planner assumes every feature on
        logger.debug("native-check store unreadable: %s", exc)
        return []
    return sorted(turned_off_here(records))


def probe_mlx() -> EngineAvailability:
    if importlib.util.find_spec("mlx") is None or importlib.util.find_spec("mlx.core") is None:
        return EngineAvailability(MLX, available=False, reason="mlx is not installed")
    try:
        mx = import_native("mlx.core")
    except Exception as exc:
        logger.warning("mlx import failed: %s", exc)
        return EngineAvailability(MLX, available=False, reason=f"mlx failed to load: {exc}")
    version = getattr(mx, "__version__", None) or _dist_version("mlx")
    try:
        device = str(mx.default_device())
    except Exception as exc:
        device = f"unknown ({exc})"
    on_gpu = "gpu" in device.lower()
    note = f"default device {device}"
    if sys.platform != "darwin":
        note += "; MLX runs on the CPU only on this platform (Metal needs macOS)"
    return EngineAvailability(
        MLX, available=True, version=version, backend="Metal" if on_gpu else "CPU", gpu_offload=on_gpu, note=note
    )


def probe_engines(*, refresh: bool = False) -> list[EngineAvailability]:
    """llama.cpp and MLX availability, computed once per process unless `refresh`."""
    with _lock:
        for name, probe in ((LLAMACPP, probe_llamacpp), (MLX, probe_mlx)):
            if refresh or name not in _cache:
                _cache[name] = probe()
        return [EngineAvailability(**vars(_cache[n])) for n in (LLAMACPP, MLX)]


def cached_engines() -> list[EngineAvailability] | None:
    """The per-process result if both engines were probed already, else None.

    Reads without the lock on purpose: a probe in progress holds it while importing.
    """
    done = [_cache.get(n) for n in (LLAMACPP, MLX)]
    if all(done):
        return [EngineAvailability(**vars(e)) for e in done]
    return None


def prewarm_engines() -> threading.Thread:
    """Start the engine probe on a daemon thread (call at app start) so the first
    probe_hardware() finds the native imports already done."""
    t = threading.Thread(target=probe_engines, name="hearth-engine-prewarm", daemon=True)
    t.start()
    return t
