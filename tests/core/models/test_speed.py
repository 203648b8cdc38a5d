"""Speed model: memory-bound decode, per-device for partial offload, KV read growing with position."""

import copy

from synthetic import GiB, llama3_8b_spec, profile

from app.core.models.devices import machine_from_profile
from app.core.models.planner import plan_load
from app.core.models.speed import ETA, T0, T_VOCAB, predict_speed


def speed(prof, spec=None, n_ctx=8192):
    spec = spec or llama3_8b_spec()
    plan = plan_load(spec, machine_from_profile(prof), n_ctx=n_ctx)
    return predict_speed(spec, plan), plan


def test_full_gpu_decode_follows_bandwidth_formula():
    spec = llama3_8b_spec()
    s, plan = speed(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]), spec)
    assert plan.verdict == "full_gpu"
    gpu_bytes = sum(spec.block_bytes) + spec.output_bytes + spec.other_bytes
    kv_at_start = 131_072 * 1  # one position of KV
    expected = 1 / ((gpu_bytes + kv_at_start) / (ETA["cuda"] * 1008e9) + T0["cuda"] + spec.n_vocab * T_VOCAB)
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
