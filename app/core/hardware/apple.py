"""Apple Silicon: chip, unified memory, GPU cores and the GPU working set Metal allows."""

from __future__ import annotations

import importlib.util
import logging
import platform
import re
import subprocess
import sys

from app.core.hardware.bandwidth import lookup_apple_bandwidth
from app.core.hardware.cpu import read_sysctl
from app.core.hardware.profile import AppleInfo
from app.core.native import import_native

logger = logging.getLogger(__name__)

GIB = 1024**3
# Metal's recommendedMaxWorkingSetSize is about 2/3 of RAM on small Macs and 3/4 on larger ones.
SMALL_MAC_LIMIT = 36 * GIB
SOURCE_WIRED = "iogpu.wired_limit_mb"
SOURCE_MLX = "mlx"
SOURCE_SMALL = "estimate (2/3 of RAM)"
SOURCE_LARGE = "estimate (3/4 of RAM)"


def is_apple_silicon(sysctl: dict[str, str] | None = None) -> bool:
    """True on macOS arm64, including a Python running under Rosetta (hw.optional.arm64 = 1)."""
    if sys.platform != "darwin":
        return False
    if platform.machine() == "arm64":
        return True
    return (sysctl or {}).get("hw.optional.arm64") == "1"


def estimate_working_set(ram_bytes: int) -> tuple[int, str]:
    if ram_bytes <= SMALL_MAC_LIMIT:
        return ram_bytes * 2 // 3, SOURCE_SMALL
    return ram_bytes * 3 // 4, SOURCE_LARGE


def mlx_working_set() -> int | None:
    """`max_recommended_working_set_size` from MLX when it is installed (Metal only), else None."""
    if importlib.util.find_spec("mlx") is None:
        return None
    try:
        mx = import_native("mlx.core")

        info_fn = getattr(mx, "device_info", None) or mx.metal.device_info
        value = info_fn().get("max_recommended_working_set_size")
    except Exception as exc:
        logger.debug("MLX device_info unavailable: %s", exc)
        return None
    return int(value) if value else None


def parse_gpu_cores(text: str) -> int | None:
    """GPU core count from `ioreg -rc AGXAccelerator -d1` ("gpu-core-count" = 38) or
    `system_profiler SPDisplaysDataType` ("Total Number of Cores: 38")."""
    m = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text) or re.search(r"Total Number of Cores:\s*(\d+)", text)
    return int(m.group(1)) if m else None


def read_gpu_cores(timeout_s: float = 0.5) -> int | None:
    """`ioreg` answers in tens of ms where system_profiler takes a second, so only ioreg is asked."""
    try:
        out = subprocess.run(
            ["ioreg", "-rc", "AGXAccelerator", "-d1"], capture_output=True, text=True, timeout=timeout_s, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("ioreg failed: %s", exc)
        return None
    return parse_gpu_cores(out)


def parse_apple(
    sysctl: dict[str, str], *, mlx_working_set_bytes: int | None = None, gpu_cores: int | None = None
) -> AppleInfo:
    """AppleInfo from sysctl values (key → value). Working set: a positive iogpu.wired_limit_mb,
    else MLX's figure when given, else the RAM-based estimate."""
    info = AppleInfo(chip=sysctl.get("machdep.cpu.brand_string", "").strip(), gpu_cores=gpu_cores)
    try:
        info.unified_memory_bytes = int(sysctl.get("hw.memsize", "0"))
    except ValueError:
        logger.warning("hw.memsize unreadable: %r", sysctl.get("hw.memsize"))
    try:
        wired_mb = int(sysctl.get("iogpu.wired_limit_mb", "0"))
    except ValueError:
        wired_mb = 0
    if wired_mb > 0:
        info.gpu_working_set_bytes, info.working_set_source = wired_mb * 1024 * 1024, SOURCE_WIRED
    elif mlx_working_set_bytes:
        info.gpu_working_set_bytes, info.working_set_source = int(mlx_working_set_bytes), SOURCE_MLX
    elif info.unified_memory_bytes:
        info.gpu_working_set_bytes, info.working_set_source = estimate_working_set(info.unified_memory_bytes)
    info.bandwidth_gbps = lookup_apple_bandwidth(info.chip).gbps
    return info


def probe_apple(sysctl: dict[str, str] | None = None, *, with_gpu_cores: bool = True) -> AppleInfo | None:
    """This Mac's Apple Silicon facts, or None when this is not Apple Silicon."""
    values = read_sysctl() if sysctl is None and sys.platform == "darwin" else (sysctl or {})
    if not is_apple_silicon(values):
        return None
    wired = values.get("iogpu.wired_limit_mb", "0").strip()
    mlx_ws = None if wired.isdigit() and int(wired) > 0 else mlx_working_set()
    cores = read_gpu_cores() if with_gpu_cores else None
    return parse_apple(values, mlx_working_set_bytes=mlx_ws, gpu_cores=cores)
