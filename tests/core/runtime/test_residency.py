"""The arithmetic of several resident models: what each holds unseen, the machine a newcomer sees, and
which models go first."""

from __future__ import annotations

from app.core.models.devices import Device, GiB, Machine
from app.core.models.memory import DeviceUse, LoadOptions, MemoryEstimate
from app.core.runtime.residency import Candidate, Holding, beside, holding_of, pick_victims


def estimate(*uses: DeviceUse) -> MemoryEstimate:
    return MemoryEstimate(LoadOptions(n_ctx=512), 512, list(uses))


def test_mapped_weights_in_ram_are_unseen_vram_is_seen():
    est = estimate(DeviceUse("CPU", weights=4 * GiB, kv=GiB), DeviceUse("CUDA0", weights=8 * GiB, kv=2 * GiB))
    held = holding_of(est, mapped=True, loaded=True)
    assert held.unseen == {"CPU": 4 * GiB}
    assert held.seen == {"CPU": GiB, "CUDA0": 10 * GiB}
    assert held.total == est.total
    # Read into anonymous memory (no mmap), all of it shows as used.
    assert holding_of(est, mapped=False, loaded=True).unseen == {}
    # Not loaded yet: nothing of it shows.
    assert holding_of(est, mapped=False, loaded=False).unseen == {"CPU": 5 * GiB, "CUDA0": 10 * GiB}
    # Apple: Metal's mapped weights are page cache too.
    metal = estimate(DeviceUse("Metal", weights=6 * GiB, kv=GiB))
    assert holding_of(metal, mapped=True, loaded=True, unified=True).unseen == {"Metal": 6 * GiB}
    assert holding_of(None, mapped=True, loaded=True) == Holding()


def test_the_machine_beside_loaded_models():
    m = Machine(
        "cuda", Device("CPU", "cpu", 20 * GiB, 16 * GiB, 50.0), (Device("CUDA0", "cuda", 9 * GiB, 8 * GiB, 900.0),)
    )
    kept = Holding(seen={"CUDA0": GiB}, unseen={"CPU": 4 * GiB})
    leaving = Holding(seen={"CUDA0": 3 * GiB, "CPU": GiB}, unseen={"CPU": 2 * GiB})
    out = beside(m, [kept], [leaving])
    assert out.cpu.budget_bytes == 16 * GiB - 4 * GiB + GiB
    assert out.gpus[0].budget_bytes == 8 * GiB + 3 * GiB
    assert beside(m, []) is m
    # Never below nothing.
    assert beside(m, [Holding(unseen={"CPU": 100 * GiB})]).cpu.budget_bytes == 0


def test_unified_memory_moves_both_devices():
    ram = Device("CPU", "cpu", 30 * GiB, 24 * GiB, 100.0)
    metal = Device("Metal", "metal", 30 * GiB, 20 * GiB, 100.0)
    out = beside(Machine("metal", ram, (metal,), unified=True), [Holding(unseen={"Metal": 5 * GiB})])
    assert (out.cpu.budget_bytes, out.gpus[0].budget_bytes) == (19 * GiB, 15 * GiB)


def c(key: str, used: float, pinned: bool = False, size: int = 1) -> Candidate:
    return Candidate(key, used, pinned, Holding(seen={"CPU": size}))


def test_least_recently_used_unpinned_go_first_and_only_as_many_as_needed():
    loaded = [c("new", 3.0), c("old", 1.0), c("pinned", 0.0, pinned=True), c("mid", 2.0)]
    asked: list[list[str]] = []

    def fits(victims) -> bool:
        asked.append([v.key for v in victims])
        return len(victims) >= 2

    assert [v.key for v in pick_victims(fits, loaded) or []] == ["old", "mid"]
    assert asked == [[], ["old"], ["old", "mid"]]
    assert pick_victims(lambda v: True, loaded) == []
    # Not enough even with every unpinned one gone.
    assert pick_victims(lambda v: False, loaded) is None


def test_the_cap_counts_the_models_that_stay():
    loaded = [c("a", 1.0), c("b", 2.0)]
    assert [v.key for v in pick_victims(lambda v: True, loaded, cap=2) or []] == ["a"]
    assert [v.key for v in pick_victims(lambda v: True, loaded, cap=1) or []] == ["a", "b"]
    assert pick_victims(lambda v: True, loaded, cap=3) == []
    # Models still loading cannot be picked but count against the cap.
    assert [v.key for v in pick_victims(lambda v: True, loaded, cap=2, staying=3) or []] == ["a", "b"]
    assert pick_victims(lambda v: True, loaded, cap=1, staying=3) is None
