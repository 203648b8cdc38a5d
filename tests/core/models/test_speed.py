"""Speed model: memory-bound decode per device class, host cost per vocabulary entry, compute-bound prefill."""

import copy
import json

import pytest
from synthetic import GiB, apple_profile, llama3_8b_spec, profile

from app.core.hardware.bandwidth import load_table, lookup_in_table
from app.core.models.calibration import MODEL_VERSION, CalibrationStore, Correction, SpeedRun
from app.core.models.compute import peak_flops, speed_class
from app.core.models.devices import machine_from_profile
from app.core.models.planner import plan_load
from app.core.models.speed import (
    ETA,
    ETA_COMPUTE,
    HOST_COPY_S_PER_ENTRY,
    HOST_SAMPLE_S_PER_ENTRY,
    LOGITS_PCIE_BPS,
    T0_LAYER,
    T0_TOKEN,
    attention_flops_per_token,
    decode_seconds,
    host_seconds,
    predict_speed,
    prefill_seconds_per_token,
)

RTX_4090 = ("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)


def gpu_profile(name, bw=1008.0, vram=80 * GiB):
    return profile(gpus=[(name, vram, vram - GiB, bw)])


def plan_on(prof, spec=None, n_ctx=8192):
    spec = spec or llama3_8b_spec()
    return spec, plan_load(spec, machine_from_profile(prof), n_ctx=n_ctx)


def speed(prof, spec=None, n_ctx=8192, **kw):
    spec, plan = plan_on(prof, spec, n_ctx)
    return predict_speed(spec, plan, **kw), plan


def test_full_gpu_decode_follows_bandwidth_formula():
    spec = llama3_8b_spec()
    s, plan = speed(profile(gpus=[RTX_4090]), spec)
    assert plan.verdict == "full_gpu" and s.speed_class == "nvidia_consumer"
    gpu_bytes = sum(spec.block_bytes) + spec.output_bytes + spec.other_bytes
    kv_at_start = 131_072 * 1  # one position of KV
    host = spec.n_vocab * (HOST_SAMPLE_S_PER_ENTRY + HOST_COPY_S_PER_ENTRY) + 4 * spec.n_vocab / LOGITS_PCIE_BPS
    fixed = T0_TOKEN + spec.n_layers * T0_LAYER["cuda"]
    expected = 1 / ((gpu_bytes + kv_at_start) / (ETA["nvidia_consumer"] * 1008e9) + fixed + host)
    assert abs(s.decode_tok_s - expected) / expected < 0.01
    assert s.decode_tok_s_full_ctx < s.decode_tok_s  # the whole KV cache is read at the end
    assert s.bound_by == "GPU"


def test_partial_offload_is_slower_than_full_and_faster_than_cpu():
    full, _ = speed(profile(gpus=[("GPU", 24 * GiB, 23 * GiB, 500)]))
    part, plan = speed(profile(gpus=[("GPU", 8 * GiB, 5 * GiB, 500)]))
    cpu, _ = speed(profile())
    assert plan.verdict == "partial"
    assert cpu.decode_tok_s < part.decode_tok_s < full.decode_tok_s
    assert part.bound_by == "CPU"


def test_moe_reads_only_active_experts():
    dense = llama3_8b_spec()
    moe = copy.deepcopy(dense)
    moe.n_expert, moe.n_expert_used = 8, 2
    moe.expert_bytes = [int(b * 0.8) for b in moe.block_bytes]
    assert speed(profile(), moe)[0].decode_tok_s > 1.5 * speed(profile(), dense)[0].decode_tok_s


def test_measured_bandwidth_is_the_basis_when_known():
    s, _ = speed(profile(bw=30.0))
    assert s.basis == "measured bandwidth, uncalibrated"
    faster, _ = speed(profile(bw=60.0))
    assert faster.decode_tok_s > s.decode_tok_s


def _with_vocab(n_vocab):
    spec = llama3_8b_spec()
    spec.n_vocab = n_vocab  # bytes unchanged: only the host work per token differs
    return spec


def test_decode_time_grows_with_vocabulary_by_the_host_cost_only():
    prof = profile(gpus=[RTX_4090])
    times = [decode_seconds(*plan_on(prof, _with_vocab(v))) for v in (32_000, 128_256, 256_000)]
    assert times[0] < times[1] < times[2]
    per_entry = (times[2] - times[1]) / (256_000 - 128_256)
    host_entry = HOST_SAMPLE_S_PER_ENTRY + HOST_COPY_S_PER_ENTRY + 4 / LOGITS_PCIE_BPS
    assert per_entry == pytest.approx(host_entry, rel=1e-6)
    # A 128k vocabulary costs well under a millisecond a token, not the ~10 ms a flat 80 ns/entry charged.
    assert times[1] - times[0] < 0.5e-3


def test_llama_bench_mode_leaves_out_sampling():
    spec, plan = plan_on(profile(gpus=[RTX_4090]))
    with_s, without = host_seconds(spec, plan), host_seconds(spec, plan, sampling=False)
    assert with_s - without == pytest.approx(spec.n_vocab * HOST_SAMPLE_S_PER_ENTRY)
    assert decode_seconds(spec, plan, sampling=False) < decode_seconds(spec, plan)


def test_discrete_gpus_also_pay_for_moving_the_logits_row():
    spec = llama3_8b_spec()
    cuda = host_seconds(*plan_on(profile(gpus=[RTX_4090]), spec), sampling=False)
    mac = apple_profile("Apple M2 Max", 64 * GiB, 48 * GiB, 60 * GiB, 400.0)
    apple = host_seconds(*plan_on(mac, spec), sampling=False)
    assert cuda - apple == pytest.approx(4 * spec.n_vocab / LOGITS_PCIE_BPS)


def test_decode_is_monotonic_in_bandwidth():
    slow = speed(gpu_profile("NVIDIA GeForce RTX 4090", bw=500))[0].decode_tok_s
    fast = speed(gpu_profile("NVIDIA GeForce RTX 4090", bw=1000))[0].decode_tok_s
    assert fast > slow


@pytest.mark.parametrize(
    ("gpu", "cls"),
    [
        ("NVIDIA GeForce RTX 4090", "nvidia_consumer"),
        ("NVIDIA RTX A6000", "nvidia_consumer"),
        ("NVIDIA L40S", "nvidia_consumer"),  # GDDR6 datacenter card: the consumer silicon and memory
        ("NVIDIA H100 PCIe", "nvidia_datacenter"),
        ("NVIDIA A100-SXM4-80GB", "nvidia_datacenter"),
        ("Tesla V100-PCIE-32GB", "nvidia_datacenter"),
        ("Some Future GPU", "nvidia_consumer"),
    ],
)
def test_speed_class_of_an_nvidia_gpu_from_the_profile(gpu, cls):
    machine = machine_from_profile(gpu_profile(gpu))
    assert speed_class(machine.gpus[0], machine.backend) == cls


@pytest.mark.parametrize(
    ("chip", "cls"),
    [
        ("Apple M1", "apple_base"),
        ("Apple M3 Pro", "apple_pro"),
        ("Apple M4 Max", "apple_max"),
        ("Apple M2 Ultra", "apple_ultra"),
    ],
)
def test_speed_class_of_an_apple_chip_from_the_profile(chip, cls):
    machine = machine_from_profile(apple_profile(chip, 64 * GiB, 48 * GiB, 60 * GiB, 400.0))
    assert speed_class(machine.gpus[0], machine.backend) == cls
    cpu_only = machine_from_profile(apple_profile(chip, 64 * GiB, 48 * GiB, 60 * GiB, 400.0), prefer_gpu=False)
    assert speed_class(cpu_only.cpu, cpu_only.backend) == "cpu"


def test_the_class_efficiency_is_the_one_applied():
    # Same bandwidth, different class: the decode time of the weights differs by the ratio of the ηs.
    spec = llama3_8b_spec()
    spec, plan_c = plan_on(gpu_profile("NVIDIA GeForce RTX 4090", bw=2000), spec)
    spec, plan_d = plan_on(gpu_profile("NVIDIA H100 PCIe", bw=2000), spec)
    fixed = T0_TOKEN + spec.n_layers * T0_LAYER["cuda"] + host_seconds(spec, plan_c)
    t_cons = decode_seconds(spec, plan_c) - fixed
    t_dc = decode_seconds(spec, plan_d) - fixed
    assert t_dc / t_cons == pytest.approx(ETA["nvidia_consumer"] / ETA["nvidia_datacenter"], rel=1e-6)
    assert predict_speed(spec, plan_d).speed_class == "nvidia_datacenter"


def test_prefill_follows_flops_within_a_class():
    s_3090 = speed(gpu_profile("NVIDIA GeForce RTX 3090", bw=936))[0].prefill_tok_s
    s_4090 = speed(gpu_profile("NVIDIA GeForce RTX 4090", bw=1008))[0].prefill_tok_s
    assert s_4090 / s_3090 == pytest.approx(330.3 / 142.3, rel=1e-6)  # resources/hardware.json figures


def test_apple_prefill_scales_with_probed_gpu_cores():
    def prefill(cores):
        prof = apple_profile("Apple M2 Ultra", 192 * GiB, 144 * GiB, 180 * GiB, 800.0)
        prof.apple.gpu_cores = cores
        return speed(prof)[0].prefill_tok_s

    assert prefill(76) / prefill(60) == pytest.approx(76 / 60, rel=1e-6)


def test_prefill_uses_the_class_compute_efficiency():
    spec, plan = plan_on(gpu_profile("NVIDIA H100 PCIe", bw=2000))
    expected = (2 * spec.n_params + 2.8 * attention_flops_per_token(spec, 512)) / (
        peak_flops(plan.machine.gpus[0]) * ETA_COMPUTE["nvidia_datacenter"]
    )
    assert prefill_seconds_per_token(spec, plan, 512) == pytest.approx(expected, rel=1e-6)


def test_attention_term_grows_with_prompt_length():
    spec = llama3_8b_spec()
    assert attention_flops_per_token(spec, 8192) == pytest.approx(2 * attention_flops_per_token(spec, 4096))
    prof = profile(gpus=[RTX_4090])
    rates = [speed(prof, spec, prompt_tokens=n)[0].prefill_tok_s for n in (512, 4096, 32768)]
    assert rates[0] > rates[1] > rates[2]  # each prompt token costs more the longer the prompt
    # ...but the weights dominate a short prompt: 512 tokens are within a few percent of 1 token.
    assert rates[0] > 0.95 * speed(prof, spec, prompt_tokens=1)[0].prefill_tok_s


def test_sliding_window_layers_cap_the_attention_span():
    spec = llama3_8b_spec()
    swa = copy.deepcopy(spec)
    swa.sliding_window, swa.swa_layers = 1024, [il % 2 == 0 for il in range(spec.n_layers)]
    assert attention_flops_per_token(swa, 512) == attention_flops_per_token(spec, 512)  # inside the window
    assert attention_flops_per_token(swa, 16384) < attention_flops_per_token(spec, 16384)


def test_calibration_still_scales_every_prediction():
    prof = profile(gpus=[RTX_4090])
    plain, _ = speed(prof)
    corrected, _ = speed(prof, correction=Correction(decode=1.25, prefill=0.5, runs=3))
    assert corrected.decode_tok_s == pytest.approx(1.25 * plain.decode_tok_s)
    assert corrected.decode_tok_s_full_ctx == pytest.approx(1.25 * plain.decode_tok_s_full_ctx)
    assert corrected.prefill_tok_s == pytest.approx(0.5 * plain.prefill_tok_s)
    assert corrected.basis.endswith("calibrated on 3 runs")


def test_calibration_ignores_runs_predicted_by_the_old_model(tmp_path):
    path = tmp_path / "calibration.json"
    old = {"backend": "cuda", "model": "m", "predicted_decode": 10.0, "measured_decode": 30.0}
    path.write_text(json.dumps({"runs": [old]}), encoding="utf-8")
    store = CalibrationStore(path)
    assert store.runs("cuda")[0].model_version == 1
    assert store.correction("cuda") == Correction()  # a ratio against the old formula is no correction
    store.record(SpeedRun(backend="cuda", model="m", predicted_decode=10.0, measured_decode=12.0))
    corr = store.correction("cuda")
    assert corr.decode == pytest.approx(1.2) and corr.runs == 1
    assert store.runs("cuda")[-1].model_version == MODEL_VERSION


def test_a_measured_prefill_twice_the_prediction_moves_only_the_prefill_factor(tmp_path):
    store = CalibrationStore(tmp_path / "calibration.json")
    run = SpeedRun(backend="cuda", model="m", predicted_decode=50.0, measured_decode=50.0)
    run.predicted_prefill, run.measured_prefill = 400.0, 800.0
    store.record(run)
    # A run recorded without a prefill prediction (a short prompt) says nothing about prefill.
    store.record(SpeedRun(backend="cuda", model="m", predicted_decode=50.0, measured_decode=50.0, measured_prefill=90))
    corr = store.correction("cuda")
    assert corr.prefill == pytest.approx(2.0) and corr.decode == pytest.approx(1.0) and corr.runs == 2
    prof = profile(gpus=[RTX_4090])
    plain, corrected = speed(prof)[0], speed(prof, correction=corr)[0]
    assert corrected.prefill_tok_s == pytest.approx(2.0 * plain.prefill_tok_s)
    assert corrected.decode_tok_s == pytest.approx(plain.decode_tok_s)


def test_the_preflight_predicts_prefill_at_the_prompt_length_it_ran():
    from app.core.runtime.preflight import PreflightResult, plan_model

    spec = llama3_8b_spec()
    machine = machine_from_profile(profile(gpus=[RTX_4090]))
    planned = plan_model(spec, machine, 8192)
    pre = PreflightResult(spec=spec, plan=planned.plan, predicted_prefill_tok_s=planned.predicted_prefill_tok_s)
    assert planned.predicted_prefill_tok_s == pytest.approx(predict_speed(spec, planned.plan).prefill_tok_s)
    assert pre.prefill_tok_s_at(512) == pytest.approx(planned.predicted_prefill_tok_s)
    assert pre.prefill_tok_s_at(8000) < pre.prefill_tok_s_at(512)  # attention grows with the prompt
    assert PreflightResult(predicted_prefill_tok_s=300.0).prefill_tok_s_at(100) == 300.0  # no plan: as given


def test_every_gpu_and_apple_chip_has_a_flops_figure():
    table = load_table()
    assert set(table["gpu_fp16_tflops"]) == set(table["gpus"])
    assert all(v > 0 for v in table["gpu_fp16_tflops"].values())
    for section in ("apple_gpu_gflops_per_core", "apple_gpu_cores"):
        assert set(table[section]) == set(table["apple_chips"])
    # The lookup resolves NVML names the way the bandwidth lookup does.
    assert lookup_in_table("NVIDIA GeForce RTX 4060 Ti", "gpu_fp16_tflops").gbps == 88.3
    assert lookup_in_table("NVIDIA H100 PCIe", "gpu_fp16_tflops").gbps == 756.0


def test_unknown_gpu_falls_back_to_a_bandwidth_guess():
    machine = machine_from_profile(gpu_profile("Mystery Accelerator 9000", bw=1000))
    assert peak_flops(machine.gpus[0]) == pytest.approx(1000e9 * 120)
