"""The CPU decode term per weight type and per layer: the quant probe's figures for this CPU when cached, else
the table."""

from __future__ import annotations

import dataclasses
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
    cpu_read_rate,
    cpu_type_speed,
    decode_seconds,
    host_seconds,
    predict_speed,
)
from app.core.paths import app_paths


def cpu_plan(spec, bandwidth_gbps: float | None = None):
    p = profile()
    if bandwidth_gbps is not None:
        p = dataclasses.replace(p, bandwidth=dataclasses.replace(p.bandwidth, cpu_measured_gbps=bandwidth_gbps))
    return plan_load(spec, machine_from_profile(p), n_ctx=4096)


def measure(rates_gbps: dict[str, float], layer_s: float | None = None) -> None:
    """As the probe would cache them for this host, for the synthetic profile's SIMD flags."""
    simd = tuple(profile().cpu.simd)
    write_quant_speeds(app_paths().cache, host_key(simd), QuantSpeeds(rates_gbps, layer_s, 30.0, time.time()))


def test_the_table_applies_until_this_cpu_is_measured():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_1": spec.weight_bytes}
    plan = cpu_plan(spec)
    assert cpu_type_speed(spec) == pytest.approx(CPU_TYPE_SPEED["Q4_1"])
    table_rate = cpu_read_rate(spec, plan.machine)
    table = predict_speed(spec, plan).decode_tok_s
    measure({"Q4_1": table_rate / 2 / 1e9})
    measured = predict_speed(spec, cpu_plan(spec))
    assert measured.decode_tok_s < 0.6 * table  # the weights now stream at half the table's rate
    assert measured.basis.startswith("decode rates measured on this CPU")  # what the fit view shows


def test_a_measured_rate_sets_the_read_time_exactly():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q8_0": spec.weight_bytes}
    plan = cpu_plan(spec)
    measure({"Q8_0": 9.5, "Q4_K": 11.0})
    fixed = T0_TOKEN + spec.n_layers * T_LAYER_CPU + host_seconds(spec, plan)
    assert cpu_read_rate(spec, plan.machine, QuantSpeeds({"Q8_0": 9.5})) == pytest.approx(9.5e9)
    # Every weight a token reads (position 0: no KV yet) at the measured rate, plus the fixed terms.
    assert decode_seconds(spec, plan, 0) - fixed == pytest.approx(spec.bytes_per_token_read / 9.5e9, rel=0.01)


def test_once_measured_the_prediction_does_not_follow_the_bandwidth_figure():
    """The read-bandwidth figure wanders between runs on a shared machine (12-26 GB/s on the development VM);
    the measured rates already say how fast decode reads, so they decide."""
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": spec.weight_bytes}
    slow_bw, fast_bw = cpu_plan(spec, 15.0), cpu_plan(spec, 26.0)
    assert decode_seconds(spec, slow_bw) > 1.5 * decode_seconds(spec, fast_bw)  # the table follows it
    measure({"Q4_K": 11.0})
    assert decode_seconds(spec, slow_bw) == pytest.approx(decode_seconds(spec, fast_bw), rel=1e-9)


def test_the_measured_layer_cost_replaces_the_table():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": spec.weight_bytes}
    plan = cpu_plan(spec)
    measure({"Q4_K": 11.0})
    before = decode_seconds(spec, plan)
    measure({"Q4_K": 11.0}, layer_s=T_LAYER_CPU + 1e-4)
    assert decode_seconds(spec, plan) - before == pytest.approx(spec.n_layers * 1e-4, rel=1e-6)


def test_unmeasured_types_keep_their_ratio_to_the_measured_q4_k():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": 1000, "Q4_1": 1000}
    machine = cpu_plan(spec).machine
    expected = 2000 / (1000 / 10e9 + 1000 / (10e9 * CPU_TYPE_SPEED["Q4_1"]))
    assert cpu_read_rate(spec, machine, QuantSpeeds({"Q4_K": 10.0})) == pytest.approx(expected)
    assert cpu_read_rate(spec, machine, QuantSpeeds({"Q4_K": 10.0, "Q4_1": 10.0})) == pytest.approx(10e9)


def test_another_cpus_figures_do_not_apply():
    spec = llama3_8b_spec()
    spec.tensor_types = {"Q4_K": spec.weight_bytes}
    before = predict_speed(spec, cpu_plan(spec)).decode_tok_s
    write_quant_speeds(app_paths().cache, host_key(("avx512f", "amx")), QuantSpeeds({"Q4_K": 3.0}, 1e-3, 30.0, 0.0))
    assert predict_speed(spec, cpu_plan(spec)).decode_tok_s == pytest.approx(before)
