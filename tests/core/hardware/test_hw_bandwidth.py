"""Bandwidth table lookups, the DDR rule, the measured read test and its cache."""

from __future__ import annotations

import json
import time

import pytest

from app.core.hardware.bandwidth import (
    CACHE_FILE_NAME,
    TABLE_PATH,
    cpu_read_bandwidth,
    ddr_bandwidth_gbps,
    load_table,
    lookup_apple_bandwidth,
    lookup_bandwidth,
    lookup_gpu_bandwidth,
    lookup_in_table,
    measure_read_bandwidth,
)


@pytest.mark.parametrize(
    ("name", "gbps"),
    [
        ("NVIDIA GeForce RTX 4090", 1008),
        ("GeForce RTX 4090", 1008),
        ("RTX 4090", 1008),
        ("NVIDIA GeForce RTX 4060 Ti", 288),
        ("NVIDIA GeForce RTX 4060", 272),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", 672),
        ("NVIDIA GeForce RTX 4080 SUPER", 736),
        ("NVIDIA GeForce RTX 5090", 1792),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H200", 4800),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA L40S", 864),
        ("NVIDIA L4", 300),
        ("Tesla T4", 320),
        ("Tesla V100-SXM2-16GB", 900),
        ("NVIDIA A10", 600),
    ],
)
def test_gpu_name_variants(name, gbps):
    res = lookup_gpu_bandwidth(name)
    assert res.gbps == gbps, res
    assert lookup_bandwidth(name).gbps == gbps


@pytest.mark.parametrize(
    ("chip", "gbps"),
    [("Apple M1", 68), ("Apple M1 Pro", 200), ("Apple M2 Max", 400), ("Apple M3 Max", 400), ("Apple M3 Ultra", 819),
     ("Apple M4", 120), ("Apple M4 Pro", 273), ("Apple M4 Max", 546), ("M2 Ultra", 800)],
)  # fmt: skip
def test_apple_chips(chip, gbps):
    assert lookup_apple_bandwidth(chip).gbps == gbps
    assert lookup_bandwidth(chip).gbps == gbps


def test_binned_chip_is_noted():
    assert "300" in lookup_apple_bandwidth("Apple M3 Max").note


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "Quadro P1000", "", "NVIDIA L40X"])
def test_unknown_is_none_with_a_note(name):
    res = lookup_bandwidth(name)
    assert res.gbps is None and res.matched is None and res.note


def test_laptop_part_is_not_read_as_the_desktop_one():
    res = lookup_gpu_bandwidth("NVIDIA GeForce RTX 4090 Laptop GPU")
    assert res.gbps is None and "laptop" in res.note


def test_table_holds_the_fit_model_figures():
    table = load_table()
    assert TABLE_PATH.name == "hardware.json" and TABLE_PATH.parent.name == "resources"
    gpus = {"RTX 3060": 360, "RTX 3090": 936, "RTX 4070": 504, "RTX 4080": 717, "A100": 1555, "H100 SXM": 3350}
    for key, gbps in gpus.items():
        assert table["gpus"][key] == gbps
    assert table["apple_chips"]["M3 Pro"] == 150 and table["apple_chips"]["M1 Ultra"] == 800


def test_other_sections_are_looked_up_like_bandwidths(tmp_path):
    assert lookup_in_table("NVIDIA GeForce RTX 4070 Ti SUPER", "gpu_fp16_tflops").gbps == 176.4  # longest key
    assert lookup_in_table("Apple M2 Ultra", "apple_gpu_cores").gbps == 76
    assert lookup_in_table("NVIDIA GeForce RTX 4090 Laptop GPU", "gpu_fp16_tflops").gbps is None
    assert lookup_in_table("RTX 4090", "no_such_section").gbps is None
    assert lookup_in_table("RTX 4090", "gpu_fp16_tflops", path=tmp_path / "absent.json").gbps is None


def test_missing_table_gives_none(tmp_path):
    res = lookup_gpu_bandwidth("RTX 4090", path=tmp_path / "absent.json")
    assert res.gbps is None and res.note


def test_ddr_rule():
    assert ddr_bandwidth_gbps(2, 3200) == pytest.approx(51.2)
    assert ddr_bandwidth_gbps(2, 6000) == pytest.approx(96.0)
    assert ddr_bandwidth_gbps(8, 4800) == pytest.approx(307.2)
    with pytest.raises(ValueError):
        ddr_bandwidth_gbps(0, 3200)


def test_measure_read_bandwidth_is_plausible_and_bounded():
    t0 = time.perf_counter()
    gbps = measure_read_bandwidth(budget_s=0.05, size_bytes=32 * 2**20)
    assert time.perf_counter() - t0 < 1.0
    assert 0.5 < gbps < 2000


def test_measure_with_threads():
    assert measure_read_bandwidth(budget_s=0.05, size_bytes=16 * 2**20, threads=2) > 0.5


class CountingMeasure:
    def __init__(self, *values: float) -> None:
        self.values, self.calls = list(values), 0

    def __call__(self) -> float:
        self.calls += 1
        return self.values.pop(0)


def test_cache_second_call_reads_refresh_measures(tmp_path):
    measure = CountingMeasure(31.5, 42.0)
    gbps, at, cached = cpu_read_bandwidth(tmp_path, "AMD EPYC", 24 * 2**30, measure=measure)
    assert (gbps, cached, measure.calls) == (31.5, False, 1)
    assert at == pytest.approx(time.time(), abs=60)

    again = cpu_read_bandwidth(tmp_path, "AMD EPYC", 24 * 2**30, measure=measure)
    assert again == (31.5, at, True) and measure.calls == 1

    gbps, _, cached = cpu_read_bandwidth(tmp_path, "AMD EPYC", 24 * 2**30, refresh=True, measure=measure)
    assert (gbps, cached, measure.calls) == (42.0, False, 2)
    assert cpu_read_bandwidth(tmp_path, "AMD EPYC", 24 * 2**30, measure=measure)[0] == 42.0


def test_cache_is_keyed_by_cpu_and_ram(tmp_path):
    measure = CountingMeasure(10.0, 20.0, 30.0)
    cpu_read_bandwidth(tmp_path, "CPU A", 8 * 2**30, measure=measure)
    assert cpu_read_bandwidth(tmp_path, "CPU B", 8 * 2**30, measure=measure)[0] == 20.0
    assert cpu_read_bandwidth(tmp_path, "CPU A", 16 * 2**30, measure=measure)[0] == 30.0
    assert len(json.loads((tmp_path / CACHE_FILE_NAME).read_text())) == 3


def test_corrupt_cache_is_remeasured(tmp_path):
    (tmp_path / CACHE_FILE_NAME).write_text("{not json")
    gbps, _, cached = cpu_read_bandwidth(tmp_path, "CPU", 2**30, measure=CountingMeasure(12.0))
    assert (gbps, cached) == (12.0, False)
    assert json.loads((tmp_path / CACHE_FILE_NAME).read_text())["CPU|1073741824"]["gbps"] == 12.0


def test_no_cache_dir_always_measures():
    measure = CountingMeasure(1.0, 2.0)
    assert cpu_read_bandwidth(None, "CPU", 1, measure=measure)[0] == 1.0
    assert cpu_read_bandwidth(None, "CPU", 1, measure=measure)[0] == 2.0
