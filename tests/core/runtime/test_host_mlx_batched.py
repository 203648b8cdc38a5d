"""The host over the batched MLX engine (slots > 1): concurrent jobs run as sequences of one
BatchGenerator on the host thread; a seeded job, which MLX cannot batch, waits and runs alone."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import ChunkEvent, GenerateJob, Started
from tests.core.runtime.test_host_batched import Log, submit_all, wait_all

PROMPTS = ["hello there", "what is the capital of a country far away", "a", "count to ten please"]


@pytest.fixture(scope="module")
def model(tiny_pair_std02):
    pytest.importorskip("mlx_lm", reason="mlx-lm runs the MLX engine")
    return tiny_pair_std02[1]


@pytest.fixture(scope="module")
def single(model):
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine()
    engine.load(LoadSpec(path=model, n_ctx=512))
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def host(model):
    from app.core.engines import default_registry

    h = EngineHost(default_registry(), name="mlx-batched-host")
    h.load_sync(LoadSpec(path=model, n_ctx=512, slots=4), plan_check=False)
    warm = h.submit(GenerateJob(request=greedy("warm up", 2)))  # MLX's one-time costs, once
    assert warm.wait(60)
    yield h
    assert h.shutdown(30)


def greedy(prompt: str, max_tokens: int, **sampling) -> GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens, **sampling))


def alone(engine, request) -> list[int]:
    return [c.token for c in engine.generate(request, threading.Event()) if c.token is not None]


def first_index(log: Log, name: str, kind) -> int:
    return next(i for i, (n, e) in enumerate(log.events) if n == name and isinstance(e, kind))


def final_index(log: Log, name: str) -> int:
    return next(
        i for i, (n, e) in enumerate(log.events) if n == name and isinstance(e, ChunkEvent) and e.chunk.finish_reason
    )


def test_four_concurrent_jobs_give_each_one_alone(host, single):
    requests = {f"j{i}": greedy(p, 20) for i, p in enumerate(PROMPTS)}
    expected = {n: alone(single, r) for n, r in requests.items()}
    log = Log()
    handles = submit_all(host, requests, log)
    wait_all(handles)
    assert {n: log.tokens(n) for n in requests} == expected
    for name, handle in handles.items():
        final = handle.result.final
        assert final.finish_reason == "length" and final.stats.generated_tokens == 20
        text = "".join(e.chunk.text for n, e in log.events if n == name and isinstance(e, ChunkEvent))
        assert text == handle.result.text
    names = [n for n, e in log.events if isinstance(e, ChunkEvent) and e.chunk.token is not None]
    assert sum(1 for x, y in itertools.pairwise(names) if x != y) >= 8  # they ran together
    assert host.state.status == "ready" and host.queue_depth == 0


def test_a_cancel_in_one_job_leaves_the_others_streaming(host, single):
    requests = {f"q{i}": greedy(p, 24) for i, p in enumerate(PROMPTS[:3])}
    expected = {n: alone(single, r) for n, r in requests.items()}
    handles: dict = {}

    def cancel_after_three(name):
        seen = [0]

        def on_event(event):
            if name == "q1" and isinstance(event, ChunkEvent) and event.chunk.token is not None:
                seen[0] += 1
                if seen[0] == 3:
                    handles["q1"].cancel()

        return on_event

    log = Log()
    handles.update(submit_all(host, requests, log, cancel_after_three))
    wait_all(handles)
    assert handles["q1"].result.final.finish_reason == "cancelled"
    assert log.tokens("q1") == expected["q1"][:3]
    assert log.tokens("q0") == expected["q0"] and log.tokens("q2") == expected["q2"]
    assert any(n == "q0" and isinstance(e, ChunkEvent) for n, e in log.events[final_index(log, "q1") :])


def test_a_job_arriving_mid_stream_joins_the_running_one(host, single):
    first, late = greedy(PROMPTS[3], 60), greedy(PROMPTS[1], 8)
    log = Log()
    a = host.submit(GenerateJob(request=first), log.sink("A"))
    deadline = time.monotonic() + 60
    while len(log.tokens("A")) < 5 and time.monotonic() < deadline:
        time.sleep(0.002)
    b = host.submit(GenerateJob(request=late), log.sink("B"))
    assert a.wait(60) and b.wait(60)
    assert log.tokens("A") == alone(single, first) and log.tokens("B") == alone(single, late)
    assert first_index(log, "B", Started) < final_index(log, "A")  # B started while A streamed


def test_a_seeded_job_waits_for_the_running_ones_runs_alone_and_samples_as_on_the_single_path(host, single):
    seeded = greedy(PROMPTS[0], 16, temperature=0.9, seed=11)
    want = alone(single, seeded)
    log = Log()
    running = {n: host.submit(GenerateJob(request=greedy(p, 24)), log.sink(n)) for n, p in zip("ab", PROMPTS[1:])}
    s = host.submit(GenerateJob(request=seeded), log.sink("s"))
    after = host.submit(GenerateJob(request=greedy(PROMPTS[3], 6)), log.sink("c"))  # FIFO: behind the seeded one
    for h in [*running.values(), s, after]:
        assert h.wait(60)
    assert log.tokens("s") == want and s.result.final.finish_reason == "length"
    start = first_index(log, "s", Started)
    assert all(final_index(log, n) < start for n in "ab")  # it waited for them
    assert final_index(log, "s") < first_index(log, "c", Started)  # and nothing joined it
