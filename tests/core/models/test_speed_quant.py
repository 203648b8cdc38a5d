"""The CPU decode term per weight type: the quant probe's figures for this CPU when cached, else the table."""

from __future__ import annotations

import time

import pytest
from synthetic import llama3_8b_spec, profile

from app.core.hardware.quant_speed import QuantSpeeds, host_key, write_quant_speeds
from app.core.models.devices import machine_from_profile
from app.core.models.planner import plan_load
from app.core.models.speed import (
    CPU_TYPE_SPEED,
    T0_TOKEN,
    T_LAYER_CPU,
    cpu_type_speed,
    decode_seconds,
    host_seconds,
    predict_speed,
)
from app.core.paths import app_paths


def cpu_plan(spec):
    return plan_load(spec, machine_from_profile(profile()), n_ctx=4096)


def measure(speeds: dict[str, float]) -> None:
    """As the probe would cache them for this host, for the synthetic profile's SIMD flags."""
    simd = tuple(profile().cpu.simd)
    write_quant_speeds(app_paths().cache, host_key(simd), QuantSpeeds(speeds, 30.0, time.time()))


def test_the_table_applies_until_this_cpu_is_measured():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_1": spec.weight_bytes}
    assert cpu_type_speed(spec) == pytest.approx(CPU_TYPE_SPEED["Q4_1"])
    table = predict_speed(spec, cpu_plan(spec)).decode_tok_s
    measure({"Q4_1": CPU_TYPE_SPEED["Q4_1"] / 2})
    measured = predict_speed(spec, cpu_plan(spec)).decode_tok_s
    assert measured < 0.6 * table  # the weights now stream at half the table's rate


def test_a_measured_type_replaces_its_table_value_exactly():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q8_0": spec.weight_bytes}
    plan = cpu_plan(spec)
    before = decode_seconds(spec, plan)
    measure({"Q8_0": CPU_TYPE_SPEED["Q8_0"] * 2, "Q4_K": 1.0})
    after = decode_seconds(spec, plan)
    # The fixed terms stay; the reads, at twice the speed, take half the time.
    fixed = T0_TOKEN + spec.n_layers * T_LAYER_CPU + host_seconds(spec, plan)
    assert after - fixed == pytest.approx((before - fixed) / 2, rel=1e-6)


def test_unmeasured_types_keep_their_ratio_to_the_measured_q4_k():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": 1000, "Q4_1": 1000}
    measured = {"Q4_K": 0.5}
    expected = 2000 / (1000 / 0.5 + 1000 / (0.5 * CPU_TYPE_SPEED["Q4_1"]))
    assert cpu_type_speed(spec, measured) == pytest.approx(expected)
    assert cpu_type_speed(spec, {"Q4_K": 0.5, "Q4_1": 0.5}) == pytest.approx(0.5)


def test_another_cpus_figures_do_not_apply():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": spec.weight_bytes}
    before = predict_speed(spec, cpu_plan(spec)).decode_tok_s
    write_quant_speeds(app_paths().cache, host_key(("avx512f", "amx")), QuantSpeeds({"Q4_K": 0.3}, 30.0, 0.0))
    assert predict_speed(spec, cpu_plan(spec)).decode_tok_s == pytest.approx(before)
