"""Planner cases on a Llama-3-8B-like Q4_K_M (32 × 128 MiB blocks, 280 MiB embeddings, 8 KV heads)."""

import pytest
from synthetic import GiB, MiB, apple_profile, llama3_8b_spec, profile

from app.core.models.devices import GPU_MARGIN, machine_from_profile
from app.core.models.memory import LoadOptions
from app.core.models.planner import plan_load, split_layers

# By hand, at 8,192 context, f16 KV, no flash attention, ubatch 512:
KV_8K = 131_072 * 8192  # 1 GiB
COMPUTE_8K = 512 * (4 * 8192 * 33 + 4 * (5 * 4096 + 1024 + 1024)) + 16 * 1024  # the KQ stage: 572 MiB
GPU_WEIGHTS = 32 * 128 * MiB + 280 * MiB + 16 * 1024  # blocks + output + output_norm


def plan(prof, spec=None, **kw):
    return plan_load(spec or llama3_8b_spec(), machine_from_profile(prof), **kw)


def test_24gb_nvidia_puts_everything_on_the_gpu():
    p = plan(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]), n_ctx=8192)
    assert p.verdict == "full_gpu" and p.options.n_gpu_layers == -1 and p.options.n_ctx == 8192
    gpu = p.estimate.device("CUDA0")
    assert gpu.weights == GPU_WEIGHTS
    assert gpu.kv == KV_8K
    assert gpu.compute == COMPUTE_8K
    assert gpu.total == GPU_WEIGHTS + KV_8K + COMPUTE_8K + 300 * MiB
    assert p.estimate.device("CPU").weights == 280 * MiB  # token_embd stays on the host
    assert "CUDA0: weights 4.27 GiB + KV 1.00 GiB (8,192 ctx, f16) + compute" in p.explanation
    assert "≤ 22.0 GiB usable VRAM" in p.explanation
    assert p.explanation.endswith("→ all 33 layers on the GPU")


def test_8gb_nvidia_offloads_as_many_layers_as_fit():
    prof = profile(gpus=[("NVIDIA GeForce RTX 4060", 8 * GiB, 7 * GiB, 272)])
    p = plan(prof, n_ctx=8192)
    budget = 7 * GiB - GPU_MARGIN
    # All 33 need GPU_WEIGHTS + KV + compute + overhead = 6.13 GiB > 6 GiB; without the output layer 5.85 GiB.
    assert p.verdict == "partial" and p.options.n_gpu_layers == 32 and p.options.n_ctx == 8192
    assert p.estimate.device("CUDA0").total <= budget
    assert p.estimate.device("CUDA0").total + 280 * MiB > budget
    assert "32 of 33 layers on the GPU" in p.explanation


def test_partial_offload_is_maximal():
    prof = profile(gpus=[("NVIDIA GeForce RTX 3050", 6 * GiB, 5 * GiB, 224)])
    m = machine_from_profile(prof)
    p = plan_load(llama3_8b_spec(), m, n_ctx=8192)
    assert p.verdict == "partial"
    more = plan_load(llama3_8b_spec(), m, n_ctx=8192, options=LoadOptions(n_ctx=8192)).options.n_gpu_layers
    assert more == p.options.n_gpu_layers
    from app.core.models.planner import _estimate, _fits

    one_more = _estimate(llama3_8b_spec(), p.options, m, p.options.n_gpu_layers + 1)
    assert not _fits(one_more, m)


def test_m1_8gb_does_not_fit_and_says_why():
    prof = apple_profile("Apple M1", 8 * GiB, int(8 * GiB * 2 / 3), 5 * GiB, 68)
    p = plan(prof, n_ctx=8192)
    assert p.verdict == "no_fit" and not p.fits
    # 5 GiB free − 1 GiB margin = 4 GiB usable; the weights alone are 4.5 GiB.
    assert "will not fit: needs 5.43 GiB even at 2,048 context, 4.0 GiB usable" in p.explanation


def test_m1_8gb_runs_a_smaller_model_on_metal():
    small = llama3_8b_spec(weight_scale=0.4)
    p = plan(apple_profile("Apple M1", 8 * GiB, int(8 * GiB * 2 / 3), 5 * GiB, 68), spec=small, n_ctx=4096)
    assert p.verdict == "full_gpu" and p.machine.backend == "metal"
    assert p.estimate.total <= 4 * GiB


def test_m2_max_64gb_full_gpu_within_working_set():
    p = plan(apple_profile("Apple M2 Max", 64 * GiB, 48 * GiB, 50 * GiB, 400), n_ctx=8192)
    assert p.verdict == "full_gpu" and p.options.n_ctx == 8192
    assert "Metal:" in p.explanation and "usable unified memory" in p.explanation


def test_working_set_limit_binds_on_apple():
    # Plenty of free RAM, but Metal may keep only 4 GiB resident: the 8B model cannot go on the GPU.
    p = plan(apple_profile("Apple M2", 16 * GiB, 4 * GiB, 14 * GiB, 100), n_ctx=8192)
    assert p.verdict != "full_gpu"


def test_cpu_only_16gb():
    p = plan(profile(ram_total=16 * GiB, ram_free=12 * GiB), n_ctx=8192)
    assert p.verdict == "cpu" and p.options.n_gpu_layers == 0
    cpu = p.estimate.device("CPU")
    assert cpu.weights == llama3_8b_spec().weight_bytes
    assert cpu.kv == KV_8K
    assert "≤ 10.4 GiB usable RAM" in p.explanation  # 12 GiB free − max(1 GiB, 10 % of 16 GiB)


def test_two_gpus_split_layers_by_free_memory():
    big = llama3_8b_spec(weight_scale=3.0)  # ~13 GiB of weights: needs both cards
    prof = profile(
        gpus=[
            ("NVIDIA GeForce RTX 3060", 12 * GiB, 11 * GiB, 360),
            ("NVIDIA GeForce RTX 3060", 12 * GiB, 11 * GiB, 360),
        ]
    )
    p = plan(prof, spec=big, n_ctx=8192)
    assert p.verdict == "full_gpu"
    a, b = p.estimate.device("CUDA0"), p.estimate.device("CUDA1")
    assert (a.layers, b.layers) == (17, 16)  # 33 layers, equal budgets; the output goes with the last
    assert a.kv == 17 * KV_8K // 32 and b.kv == 15 * KV_8K // 32  # CUDA1: 15 blocks + the output layer
    assert a.total <= 10 * GiB and b.total <= 10 * GiB


def test_context_is_lowered_to_fit_and_said():
    # 6 GiB usable: 8,192 context needs 6.15 GiB on the CPU; 4,096 needs about 5.4 GiB.
    prof = profile(ram_total=8 * GiB, ram_free=7 * GiB)
    p = plan(prof, n_ctx=32768)
    assert p.fits and p.ctx_reduced and p.requested_ctx == 8192  # capped by the trained context
    assert p.options.n_ctx == 4096
    assert f"context lowered from 8,192 to {p.options.n_ctx:,} to fit" in p.explanation


def test_live_free_memory_not_total_is_used():
    busy = profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 3 * GiB, 1008)])
    assert plan(busy, n_ctx=8192).verdict in ("partial", "cpu")


@pytest.mark.parametrize(
    "n,budgets,expected",
    [
        (33, [10, 10], [17, 16]),
        (10, [3, 1], [8, 2]),
        (5, [0, 4], [0, 5]),
        (4, [], []),
    ],
)
def test_split_layers(n, budgets, expected):
    assert split_layers(n, budgets) == expected
