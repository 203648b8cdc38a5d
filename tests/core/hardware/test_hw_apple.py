"""Apple Silicon facts from recorded sysctl outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.core.hardware.apple import (
    SOURCE_LARGE,
    SOURCE_MLX,
    SOURCE_SMALL,
    SOURCE_WIRED,
    estimate_working_set,
    is_apple_silicon,
    parse_apple,
    parse_gpu_cores,
    probe_apple,
)
from app.core.hardware.cpu import parse_sysctl

DATA = Path(__file__).parent / "data"
GIB = 2**30


def _sysctl(name: str) -> dict[str, str]:
    return parse_sysctl((DATA / name).read_text(encoding="utf-8"))


def test_m2_max_64gb_estimates_three_quarters():
    info = parse_apple(_sysctl("sysctl_m2_max_64gb.txt"))
    assert info.chip == "Apple M2 Max"
    assert info.unified_memory_bytes == 64 * GIB
    assert info.gpu_working_set_bytes == 48 * GIB
    assert info.working_set_source == SOURCE_LARGE
    assert info.bandwidth_gbps == 400


def test_wired_limit_wins_when_set():
    values = {**_sysctl("sysctl_m2_max_64gb.txt"), "iogpu.wired_limit_mb": "57344"}
    info = parse_apple(values, mlx_working_set_bytes=40 * GIB)
    assert info.gpu_working_set_bytes == 56 * GIB
    assert info.working_set_source == SOURCE_WIRED


def test_mlx_figure_used_when_wired_limit_is_zero():
    info = parse_apple(_sysctl("sysctl_m2_max_64gb.txt"), mlx_working_set_bytes=51_539_607_552)
    assert info.gpu_working_set_bytes == 51_539_607_552
    assert info.working_set_source == SOURCE_MLX


def test_m1_8gb_estimates_two_thirds():
    info = parse_apple(_sysctl("sysctl_m1_8gb.txt"), gpu_cores=8)
    assert info.chip == "Apple M1"
    assert info.unified_memory_bytes == 8 * GIB
    assert info.gpu_working_set_bytes == 8 * GIB * 2 // 3
    assert info.working_set_source == SOURCE_SMALL
    assert info.bandwidth_gbps == 68
    assert info.gpu_cores == 8


@pytest.mark.parametrize(
    ("ram_gib", "fraction", "source"),
    [(16, (2, 3), SOURCE_SMALL), (36, (2, 3), SOURCE_SMALL), (48, (3, 4), SOURCE_LARGE), (192, (3, 4), SOURCE_LARGE)],
)
def test_estimate_boundary(ram_gib, fraction, source):
    ram = ram_gib * GIB
    assert estimate_working_set(ram) == (ram * fraction[0] // fraction[1], source)


def test_garbage_values_do_not_raise():
    values = {"machdep.cpu.brand_string": "Apple M9 Hyper", "hw.memsize": "lots", "iogpu.wired_limit_mb": "x"}
    info = parse_apple(values)
    assert info.unified_memory_bytes == 0 and info.gpu_working_set_bytes == 0
    assert info.bandwidth_gbps is None


def test_parse_gpu_cores():
    ioreg = (
        "+-o AGXAcceleratorG14X  <class AGXAcceleratorG14X>\n    {\n"
        '      "gpu-core-count" = 38\n      "model" = "Apple M2 Max"\n'
    )
    assert parse_gpu_cores(ioreg) == 38
    profiler = "Graphics/Displays:\n\n    Apple M1:\n\n      Chipset Model: Apple M1\n      Total Number of Cores: 8\n"
    assert parse_gpu_cores(profiler) == 8
    assert parse_gpu_cores("nothing here") is None


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-Mac path")
def test_not_probed_off_macos():
    assert not is_apple_silicon(_sysctl("sysctl_m2_max_64gb.txt"))
    assert probe_apple(_sysctl("sysctl_m2_max_64gb.txt")) is None
    assert probe_apple() is None
