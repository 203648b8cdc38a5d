"""ModelPool: several models loaded at once, each on its own host; routing by name, eviction by memory
(least recently used, unpinned first), the count cap, idle time-to-live, unloading."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.models.devices import Device, GiB, Machine
from app.core.runtime.jobs import (
    KEEP_FOREVER,
    ChunkEvent,
    EmbedJob,
    GenerateJob,
    JobFailed,
    LoadJob,
    UnloadJob,
)
from app.core.runtime.pool import ModelPool
from app.core.runtime.preflight import check_gguf, planned_load
from tests.core.runtime.conftest import NameResolver
from tests.fixtures.fake_engine import FakeEngine
from tests.helpers import wait_until


def req(max_tokens: int = 5) -> GenerateRequest:
    return GenerateRequest(prompt="tell me", sampling=SamplingParams(max_tokens=max_tokens))


def loaded_names(pool: ModelPool) -> list[str]:
    return sorted(Path(r.key).stem for r in pool.residents() if r.state.model is not None)


def test_two_models_generate_at_the_same_time(make_pool, tmp_path):
    pool = make_pool(tmp_path, tok_s=50, script="w " * 40)
    running: dict[str, set[str]] = {"a": set(), "b": set()}
    overlap = threading.Event()

    def sink(name):
        def on(event):
            if isinstance(event, ChunkEvent):
                running[name].add(threading.current_thread().name)
                if running["a"] and running["b"]:
                    overlap.set()

        return on

    ha = pool.submit(GenerateJob(req(30), model="a"), sink("a"))
    hb = pool.submit(GenerateJob(req(30), model="b"), sink("b"))
    assert overlap.wait(10), "the second model waited for the first"
    assert ha.wait(10) and hb.wait(10)
    assert ha.error is None and hb.error is None
    # Each model on its own thread.
    assert running["a"] and running["b"] and running["a"].isdisjoint(running["b"])
    assert loaded_names(pool) == ["a", "b"]


def test_a_job_naming_no_model_runs_on_the_one_in_focus(make_pool, tmp_path):
    pool = make_pool(tmp_path, script="x y")
    missing = pool.submit(GenerateJob(req()))
    assert missing.wait(5) and missing.error_code == "model_not_found"
    pool.load_sync(NameResolver(tmp_path)("a").spec, "fake")
    pool.submit(GenerateJob(req(), model="b")).wait(5)
    assert pool.state.model is not None and Path(pool.state.model.path).stem == "a"  # the loaded one, not the JIT one
    handle = pool.submit(GenerateJob(req()))
    assert handle.wait(5) and handle.error is None
    assert [r.focus for r in pool.residents() if Path(r.key).stem == "a"] == [True]


def test_unknown_models_fail_through_the_sink_and_jit_off_refuses(make_pool, tmp_path):
    pool = make_pool(tmp_path)
    events = []
    handle = pool.submit(GenerateJob(req(), model="nope"), events.append)
    assert handle.done.is_set() and handle.error_code == "model_not_found"
    assert isinstance(events[-1], JobFailed) and events[-1].code == "model_not_found"
    pool.jit = False
    handle = pool.submit(EmbedJob(["hi"], model="a"))
    assert handle.wait(5) and handle.error_code == "model_not_found" and "not loaded" in (handle.error or "")
    assert pool.residents() == []


def test_unload_one_every_and_unknown(make_pool, tmp_path):
    pool = make_pool(tmp_path)
    for name in ("a", "b", "c"):
        assert pool.submit(GenerateJob(req(), model=name)).wait(5)
    assert loaded_names(pool) == ["a", "b", "c"]
    assert pool.submit(UnloadJob(model="b")).wait(5)
    assert loaded_names(pool) == ["a", "c"]
    not_loaded = pool.submit(UnloadJob(model="b"))
    assert not_loaded.wait(5) and not_loaded.error_code == "model_not_found"
    assert pool.submit(UnloadJob(every=True)).wait(5)
    assert pool.residents() == [] and pool.state.model is None


def test_a_failed_load_leaves_nothing_behind(make_pool, tmp_path):
    pool = make_pool(tmp_path, fail_on_load=lambda p: Path(p).stem == "b")
    assert pool.submit(GenerateJob(req(), model="a")).wait(5)
    bad = pool.submit(GenerateJob(req(), model="b"))
    assert bad.wait(5) and bad.error is not None
    wait_until(lambda: loaded_names(pool) == ["a"] and len(pool.residents()) == 1, 5)


def test_the_cap_unloads_the_least_recently_used(make_pool, tmp_path):
    pool = make_pool(tmp_path, max_models=2)
    notices: list[str] = []
    pool.notice.connect(notices.append)
    for name in ("a", "b", "a", "c"):  # b is the least recently used when c comes
        handle = pool.submit(GenerateJob(req(), model=name))
        assert handle.wait(5) and handle.error is None
    assert loaded_names(pool) == ["a", "c"]
    assert notices == ["Unloaded b.fake to make room for c.fake"]


def test_a_pinned_model_stays_and_the_next_goes(make_pool, tmp_path):
    pool = make_pool(tmp_path, max_models=2)
    spec = NameResolver(tmp_path)("a").spec
    assert pool.submit(LoadJob(spec=spec, format="fake", pin=True)).wait(5)
    for name in ("b", "c"):
        assert pool.submit(GenerateJob(req(), model=name)).wait(5)
    assert loaded_names(pool) == ["a", "c"]  # a is older than b, but pinned
    assert [r.pinned for r in pool.residents() if Path(r.key).stem == "a"] == [True]


def test_an_unloaded_model_finishes_the_jobs_it_has(make_pool, tmp_path):
    pool = make_pool(tmp_path, max_models=1, tok_s=40, script="w " * 30)
    first = pool.submit(GenerateJob(req(20), model="a"))
    wait_until(lambda: pool.state.status == "generating", 5)
    second = pool.submit(GenerateJob(req(3), model="b"))
    assert first.wait(10) and second.wait(10)
    assert first.error is None and first.result.final.finish_reason == "length"  # not cancelled
    assert second.error is None and loaded_names(pool) == ["b"]


def test_idle_models_unload_after_their_time_to_live(make_pool, tmp_path):
    pool = make_pool(tmp_path, idle_ttl_s=0.3)
    assert pool.submit(GenerateJob(req(), model="a")).wait(5)
    assert pool.submit(GenerateJob(req(), model="b", ttl_s=KEEP_FOREVER)).wait(5)
    [a] = [r for r in pool.residents() if Path(r.key).stem == "a"]
    assert a.ttl_s == 0.3 and a.idle_left_s is not None and a.idle_left_s <= 0.3
    wait_until(lambda: loaded_names(pool) == ["b"], 5)
    [b] = pool.residents()
    assert b.ttl_s is None and b.idle_left_s is None
    # keep_alive 0: unloaded as soon as the job is over.
    assert pool.submit(GenerateJob(req(), model="c", ttl_s=0)).wait(5)
    wait_until(lambda: loaded_names(pool) == ["b"], 5)


def test_pinning_stops_the_clock(make_pool, tmp_path):
    pool = make_pool(tmp_path, idle_ttl_s=0.2)
    assert pool.submit(GenerateJob(req(), model="a")).wait(5)
    assert pool.keep("a", pin=True)
    time.sleep(1.5)
    assert loaded_names(pool) == ["a"]
    assert not pool.keep("b", pin=True)  # not loaded
    assert pool.keep("a", pin=False)
    wait_until(lambda: loaded_names(pool) == [], 5)


# -- memory: tiny GGUFs planned by the real planner on a simulated machine ------------------------------


def small_machine(budget: int) -> Machine:
    cpu = Device("CPU", "cpu", budget + GiB, budget, 50.0, "RAM")
    return Machine("cpu", cpu, (), cores=4)


def simulated(gguf: Path, models_room: float, engines: list[FakeEngine]):
    """(one model's planned total, a live machine with room for `models_room` of them, as the OS shows it:
    a loaded model's KV cache and buffers are used, its memory-mapped weights are not)."""
    spec = LoadSpec(path=gguf, n_ctx=512)
    estimate = planned_load(check_gguf(gguf), spec, small_machine(64 * GiB)).plan.estimate
    cpu = estimate.device("CPU")
    assert cpu is not None and 0 < cpu.weights < estimate.total

    def live() -> Machine:
        loaded = sum(1 for e in engines if e.info is not None)
        return small_machine(int(estimate.total * models_room) - loaded * (estimate.total - cpu.weights))

    return estimate.total, live


def test_eviction_by_memory_keeps_what_fits(make_pool, tmp_path, tiny_gguf_f16):
    engines: list[FakeEngine] = []
    # Room for two beside each other, not three: only if what they map unseen is counted.
    need, live = simulated(tiny_gguf_f16, 2.5, engines)
    pool = make_pool(tmp_path, fmt="gguf", ext="gguf", files=tiny_gguf_f16, engines=engines, machine=live)
    notices: list[str] = []
    pool.notice.connect(notices.append)
    for name in ("a", "b", "a", "c"):
        handle = pool.submit(GenerateJob(req(), model=name))
        assert handle.wait(10) and handle.error is None, handle.error
    assert loaded_names(pool) == ["a", "c"]
    assert notices == ["Unloaded b.gguf to make room for c.gguf"]
    assert all(abs(r.memory_bytes - need) <= need * 0.05 for r in pool.residents())


def test_a_model_that_cannot_fit_beside_pinned_ones_is_refused(make_pool, tmp_path, tiny_gguf_f16):
    engines: list[FakeEngine] = []
    _, live = simulated(tiny_gguf_f16, 1.5, engines)
    pool = make_pool(tmp_path, fmt="gguf", ext="gguf", files=tiny_gguf_f16, engines=engines, machine=live)
    resolver = NameResolver(tmp_path, "gguf", "gguf")
    assert pool.submit(dataclasses.replace(resolver("a"), pin=True)).wait(10)
    refused = pool.submit(GenerateJob(req(), model="b"))
    assert refused.wait(10) and refused.error is not None
    assert "will not fit" in refused.error and "Kept loaded (pinned): a.gguf" in refused.error
    wait_until(lambda: loaded_names(pool) == ["a"] and len(pool.residents()) == 1, 5)


def test_a_loaded_model_is_kept_and_unloaded_by_its_key(make_pool, tmp_path):
    """Views name a model by `Resident.key` (its file), which the resolver, asked for library names, need not know."""
    pool = make_pool(tmp_path)
    assert pool.submit(GenerateJob(req(), model="a")).wait(5)
    key = pool.residents()[0].key
    assert pool.keep(key, pin=True)
    assert pool.residents()[0].pinned
    handle = pool.submit(UnloadJob(model=key, even_pinned=True))
    assert handle.wait(5) and handle.error is None
    assert pool.residents() == []


def test_a_load_waits_for_a_model_still_unloading(make_pool, tmp_path):
    engines: list[FakeEngine] = []
    pool = make_pool(tmp_path, engines=engines, tok_s=40, script="w " * 30)
    running = pool.submit(GenerateJob(req(15), model="a"))
    wait_until(lambda: pool.state.status == "generating", 5)
    assert pool.submit(UnloadJob(model="a")) is not None  # it finishes its reply first, then unloads
    seen: list[int] = []

    def sink(event) -> None:
        if isinstance(event, ChunkEvent) and not seen:
            seen.append(engines[0].unloads)

    b = pool.submit(GenerateJob(req(2), model="b"), sink)
    assert running.wait(10) and b.wait(10)
    assert running.error is None and running.result.final.finish_reason == "length"  # not cut off
    assert seen == [1]  # a's memory was back before b was loaded
