"""RAM and swap from psutil."""

from __future__ import annotations

from collections import namedtuple

import psutil

from app.core.hardware.memory import memory_from_psutil, probe_memory


def test_memory_from_psutil_maps_fields():
    vm = namedtuple("vm", "total available")(16 * 2**30, 9 * 2**30)
    swap = namedtuple("swap", "total free")(2 * 2**30, 2**30)
    info = memory_from_psutil(vm, swap)
    assert (info.total_bytes, info.available_bytes) == (16 * 2**30, 9 * 2**30)
    assert (info.swap_total_bytes, info.swap_free_bytes) == (2 * 2**30, 2**30)


def test_probe_memory_matches_psutil():
    info = probe_memory()
    total = psutil.virtual_memory().total
    assert abs(info.total_bytes - total) <= 0.01 * total
    assert 0 < info.available_bytes <= info.total_bytes
    assert 0 <= info.swap_free_bytes <= info.swap_total_bytes or info.swap_total_bytes == 0
