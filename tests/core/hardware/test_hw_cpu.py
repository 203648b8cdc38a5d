"""CPU parsing from recorded /proc/cpuinfo and sysctl outputs, and the real probe on Linux."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from app.core.hardware.cpu import (
    SIMD_NAMES,
    normalise_flags,
    parse_proc_cpuinfo,
    parse_sysctl,
    parse_sysctl_cpu,
    probe_cpu,
)

DATA = Path(__file__).parent / "data"


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _in_canonical_order(simd: list[str]) -> bool:
    return simd == [n for n in SIMD_NAMES if n in simd]


def test_x86_epyc_flags():
    brand, simd = parse_proc_cpuinfo(_read("proc_cpuinfo_x86_epyc.txt"))
    assert brand == "AMD EPYC"
    assert simd == [
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    ]  # fmt: skip


def test_x86_amx_flags_collapse_to_one_name():
    brand, simd = parse_proc_cpuinfo(_read("proc_cpuinfo_x86_sapphire_rapids.txt"))
    assert brand == "Intel(R) Xeon(R) Platinum 8488C"
    assert simd.count("amx") == 1
    assert {"avx_vnni", "avx512_bf16", "avx512_vnni"} <= set(simd)
    assert not {"neon", "sve"} & set(simd)
    assert _in_canonical_order(simd)


def test_aarch64_server_features_are_renamed():
    brand, simd = parse_proc_cpuinfo(_read("proc_cpuinfo_aarch64_neoverse_v1.txt"))
    assert brand == "ARM Neoverse-V1"
    assert simd == ["neon", "sve", "dotprod", "i8mm"]


def test_aarch64_without_dotprod():
    brand, simd = parse_proc_cpuinfo(_read("proc_cpuinfo_aarch64_rpi4.txt"))
    assert brand == "ARM Cortex-A72"
    assert simd == ["neon"]


def test_unknown_arm_part_still_gets_a_brand():
    text = "processor\t: 0\nFeatures\t: fp asimd asimddp\nCPU implementer\t: 0x51\nCPU part\t: 0x001\n"
    brand, simd = parse_proc_cpuinfo(text)
    assert "0x51" in brand and "0x001" in brand
    assert simd == ["neon", "dotprod"]


def test_normalise_flags_drops_unknown_and_ignores_case():
    assert normalise_flags(["AVX2", "sse3", "amx_tile", "amx_int8", "SVE2", "bogus"]) == ["avx2", "amx", "sve"]
    assert normalise_flags([]) == []


def test_empty_cpuinfo_gives_nothing():
    assert parse_proc_cpuinfo("") == ("", [])


@pytest.mark.parametrize(
    ("fixture", "brand", "simd"),
    [
        ("sysctl_m2_max_64gb.txt", "Apple M2 Max", ["neon", "dotprod", "i8mm"]),
        ("sysctl_m1_8gb.txt", "Apple M1", ["neon", "dotprod"]),
        ("sysctl_intel_mac.txt", "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz", ["sse4_2", "avx", "avx2", "fma", "f16c"]),
    ],
)
def test_macos_sysctl(fixture, brand, simd):
    assert parse_sysctl_cpu(parse_sysctl(_read(fixture))) == (brand, simd)


def test_parse_sysctl_keeps_colons_in_values():
    values = parse_sysctl("machdep.cpu.brand_string: Weird: CPU\nhw.memsize: 42\n\nnot a pair\n")
    assert values == {"machdep.cpu.brand_string": "Weird: CPU", "hw.memsize": "42"}


def test_probe_cpu_with_recorded_sysctl_reports_arm64():
    info = probe_cpu(sysctl=parse_sysctl(_read("sysctl_m2_max_64gb.txt")))
    assert info.brand == "Apple M2 Max"
    assert info.arch == "arm64"
    assert "neon" in info.simd


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_probe_cpu_on_this_linux_machine():
    info = probe_cpu()
    assert info.arch == platform.machine()
    assert info.logical_cores == os.cpu_count()
    assert info.physical_cores is not None and 1 <= info.physical_cores <= info.logical_cores
    assert info.brand
    expected = set(parse_proc_cpuinfo(Path("/proc/cpuinfo").read_text())[1])
    assert set(info.simd) == expected
    if platform.machine() == "x86_64" and " avx2 " in Path("/proc/cpuinfo").read_text():
        assert "avx2" in info.simd
