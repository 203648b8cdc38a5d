"""Parallel slots: the planner plans one conversation's context and offload, then gives it as many slots
(each with its own n_ctx KV cells) as fit beside it, never trading the context for them.

The Llama-3-8B-like model of test_planner.py: at 8,192 context one slot's f16 KV is exactly 1 GiB, and
the full-GPU load without KV takes GPU_WEIGHTS + COMPUTE_8K + 300 MiB overhead = 5.13 GiB.
"""

import pytest
from synthetic import GiB, MiB, llama3_8b_spec, profile

from app.core.models.devices import machine_from_profile
from app.core.models.memory import LoadOptions
from app.core.models.planner import AUTO_SLOTS_SHARE, _estimate, _fits, plan_load
from app.core.settings import AUTO_PARALLEL, AUTO_PARALLEL_MAX

KV_8K = 131_072 * 8192  # 1 GiB per slot
COMPUTE_8K = 512 * (4 * 8192 * 33 + 4 * (5 * 4096 + 1024 + 1024)) + 16 * 1024
GPU_WEIGHTS = 32 * 128 * MiB + 280 * MiB + 16 * 1024
FIXED = GPU_WEIGHTS + COMPUTE_8K + 300 * MiB


def gpu_machine(free_gib: float):
    """One NVIDIA GPU with `free_gib` free (usable: 1 GiB less)."""
    return machine_from_profile(profile(gpus=[("NVIDIA GeForce RTX 4060 Ti", 16 * GiB, int(free_gib * GiB), 288)]))


@pytest.mark.parametrize(
    ("free_gib", "slots"),
    [
        (23.0, 4),  # 22 GiB usable: 5.13 + 4 × 1 fits with room to spare
        (9.0, 2),  # 8 GiB usable: 5.13 + 2 = 7.13 fits, 5.13 + 3 = 8.13 does not
        (8.0, 1),  # 7 GiB usable: a second slot (7.13) does not fit
    ],
)
def test_slots_are_the_most_that_fit_beside_the_planned_context(free_gib, slots):
    machine = gpu_machine(free_gib)
    plan = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=4)
    assert plan.verdict == "full_gpu" and plan.options.n_ctx == 8192 and plan.options.n_gpu_layers == -1
    assert plan.slots == slots and plan.options.n_seq == slots and plan.slots_requested == 4
    assert not plan.options.kv_unified or slots == 1  # each slot has its own cells: replies are exact
    gpu = plan.estimate.device("CUDA0")
    assert gpu.kv == slots * KV_8K
    assert gpu.compute == COMPUTE_8K  # attention spans one slot's cells, whatever the number of slots
    assert gpu.total == FIXED + slots * KV_8K <= machine.gpus[0].budget_bytes
    if slots < 4:  # one slot more would not have fit
        more = plan.options.model_copy(update={"n_seq": slots + 1, "kv_unified": False})
        assert not _fits(_estimate(llama3_8b_spec(), more, machine, 33), machine)
    kv_text = f"{slots} × 8,192 ctx" if slots > 1 else "8,192 ctx"
    assert f"KV {slots}.00 GiB ({kv_text}, f16)" in plan.explanation
    slot_word = "slots" if slots > 1 else "slot"
    line = f"{slots} parallel {slot_word} × 8,192 tokens: KV {slots}.00 GiB"
    assert line + ("" if slots == 4 else f" (room for {slots} of the 4 asked)") in plan.explanation.splitlines()


def test_fewer_slots_never_a_smaller_context_or_fewer_gpu_layers():
    # 7 GiB usable holds 32 of 33 layers at 8,192 context for one conversation; slots must not lower either.
    machine = gpu_machine(7.0)
    single = plan_load(llama3_8b_spec(), machine, n_ctx=8192)
    plan = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=4)
    assert single.verdict == "partial" and single.options.n_gpu_layers == 32
    assert (plan.verdict, plan.options.n_ctx, plan.options.n_gpu_layers) == ("partial", 8192, 32)
    assert plan.slots == 1 and plan.estimate.total == single.estimate.total


def test_cpu_slots_share_the_ram_budget():
    machine = machine_from_profile(profile(ram_free=12 * GiB))
    plan = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=16)
    cpu = plan.estimate.device("CPU")
    assert plan.verdict == "cpu" and plan.options.n_ctx == 8192
    assert cpu.kv == plan.slots * KV_8K and cpu.total <= machine.cpu.budget_bytes
    one_more = plan.options.model_copy(update={"n_seq": plan.slots + 1, "kv_unified": False})
    assert not _fits(_estimate(llama3_8b_spec(), one_more, machine, 0), machine)
    assert 1 < plan.slots < 16


def test_one_slot_asked_is_the_single_stream_plan():
    machine = gpu_machine(23.0)
    plan = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=1)
    assert plan.slots == 1 and "parallel" not in plan.explanation
    assert plan.estimate.total == plan_load(llama3_8b_spec(), machine, n_ctx=8192).estimate.total


def test_a_load_checked_as_asked_keeps_its_slots():
    # Preflight's check passes the slots a LoadSpec asks for; without max_slots they are taken as given.
    opts = LoadOptions(n_ctx=8192, n_seq=3, kv_unified=False)
    plan = plan_load(llama3_8b_spec(), gpu_machine(23.0), n_ctx=8192, options=opts)
    assert plan.slots == 3 and plan.estimate.device("CUDA0").kv == 3 * KV_8K


def test_bad_slot_count_is_refused():
    with pytest.raises(ValueError, match=r"0 \(auto\) or more"):
        plan_load(llama3_8b_spec(), gpu_machine(23.0), n_ctx=8192, max_slots=-1)


@pytest.mark.parametrize(
    ("free_gib", "slots"),
    [
        (23.0, 8),  # 22 GiB usable, 15.87 left beside one slot: 7 more slots (7 GiB) are within half of it
        (12.0, 3),  # 11 usable, 4.87 left: half is 2.43 GiB, two more slots
        (9.0, 1),  # 8 usable, 1.87 left: half of it holds no second slot, though max_slots=4 fits two
    ],
)
def test_auto_gives_as_many_slots_as_half_the_memory_left_holds_up_to_eight(free_gib, slots):
    machine = gpu_machine(free_gib)
    plan = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=AUTO_PARALLEL)
    assert plan.options.n_ctx == 8192 and plan.slots == slots and plan.slots_requested == AUTO_PARALLEL
    usable = machine.gpus[0].budget_bytes
    left = usable - (FIXED + KV_8K)
    assert (slots - 1) * KV_8K <= AUTO_SLOTS_SHARE * left  # the extra slots' KV within the share
    if slots < AUTO_PARALLEL_MAX:  # one more would take more than the share
        assert slots * KV_8K > AUTO_SLOTS_SHARE * left
    slot_word = "slots" if slots > 1 else "slot"
    line = f"{slots} parallel {slot_word} × 8,192 tokens: KV {slots}.00 GiB (auto: as many as memory allows, up to 8)"
    assert line in plan.explanation.splitlines()


def test_auto_on_unified_memory_counts_the_one_ram_and_never_more_than_asked_fits():
    from synthetic import apple_profile

    machine = machine_from_profile(apple_profile("Apple M2 Pro", 32 * GiB, 21 * GiB, 20 * GiB, 200))
    auto = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=AUTO_PARALLEL)
    asked = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=AUTO_PARALLEL_MAX)
    single = plan_load(llama3_8b_spec(), machine, n_ctx=8192, max_slots=1)
    assert 1 <= auto.slots <= asked.slots
    extra = auto.estimate.total - single.estimate.total
    assert extra <= AUTO_SLOTS_SHARE * (machine.cpu.budget_bytes - single.estimate.total)
