"""System RAM and swap, from psutil."""

from __future__ import annotations

import logging
from typing import Any

from app.core.hardware.profile import MemoryInfo

logger = logging.getLogger(__name__)


def memory_from_psutil(vm: Any, swap: Any) -> MemoryInfo:
    """Build MemoryInfo from psutil's virtual_memory() and swap_memory() results (or look-alikes)."""
    return MemoryInfo(
        total_bytes=int(vm.total),
        available_bytes=int(vm.available),
        swap_total_bytes=int(swap.total),
        swap_free_bytes=int(swap.free),
    )


def probe_memory() -> MemoryInfo:
    """This machine's RAM and swap; zeros (logged) when psutil is missing."""
    try:
        import psutil
    except ImportError:
        logger.warning("psutil is not installed: memory unknown")
        return MemoryInfo()
    try:
        swap = psutil.swap_memory()
    except (OSError, RuntimeError) as exc:  # some containers hide swap accounting
        logger.warning("swap unknown: %s", exc)
        swap = type("NoSwap", (), {"total": 0, "free": 0})()
    return memory_from_psutil(psutil.virtual_memory(), swap)
