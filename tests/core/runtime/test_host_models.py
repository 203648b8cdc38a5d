"""The host serves jobs that name their model (JIT loading, checked when the job starts), says why a
job failed with a code, counts tokens, tells a full queue when to retry, and unloads when idle."""

from __future__ import annotations

import time

import pytest

from app.core.engines.base import GenerateRequest, SamplingParams
from app.core.runtime.jobs import (
    ChunkEvent,
    CountJob,
    GenerateJob,
    HostBusy,
    JobDone,
    JobFailed,
    LoadJob,
    ModelNotFound,
    Started,
    TokenCount,
)
from tests.core.runtime.conftest import Recorder, fake_spec
from tests.fixtures.fake_engine import FakeEngine
from tests.helpers import wait_until

MODELS = {"alpha": "alpha.fake", "beta": "beta.fake"}


def resolver(name: str) -> LoadJob:
    if name not in MODELS:
        raise ModelNotFound(f"no model {name!r} in the library")
    return LoadJob(spec=fake_spec(MODELS[name], n_ctx=64), format="fake")


def req(prompt: str = "tell me a story", max_tokens: int | None = 4) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens))


def loaded_name(host) -> str | None:
    return host.state.model.path.name if host.state.model is not None else None


def test_a_job_for_another_model_loads_it_first(make_host):
    engines: list[FakeEngine] = []
    host = make_host(engines, resolver=resolver)
    host.load_sync(fake_spec("alpha.fake"), "fake")
    rec = Recorder()
    handle = host.submit(GenerateJob(req(), source="api", model="beta"), rec)
    assert handle.wait(5) and handle.error is None
    assert loaded_name(host) == "beta.fake"
    assert [e.info.path.name for e in engines if e.info] == ["beta.fake"]  # alpha was unloaded
    started = [e for e in rec.events if isinstance(e, Started)]
    assert len(started) == 1 and started[0].model.path.name == "beta.fake"
    assert isinstance(rec.events[0], Started) and isinstance(rec.events[-1], JobDone)
    # The same model again: no reload.
    loads = sum(e.loads for e in engines)
    again = host.submit(GenerateJob(req(), model="beta"))
    assert again.wait(5) and again.error is None and sum(e.loads for e in engines) == loads


def test_the_model_is_checked_when_the_job_starts_not_when_it_was_queued(make_host):
    host = make_host(resolver=resolver, tok_s=50)
    host.load_sync(fake_spec("alpha.fake"), "fake")
    slow = host.submit(GenerateJob(req(max_tokens=10)))  # on alpha, holds the host ~0.2 s
    swap = host.submit(LoadJob(spec=fake_spec("beta.fake", n_ctx=64), format="fake"))
    rec = Recorder()
    mine = host.submit(GenerateJob(req(), model="alpha"), rec)  # queued while alpha was loaded
    assert all(h.wait(10) for h in (slow, swap, mine))
    assert mine.error is None
    (started,) = [e for e in rec.events if isinstance(e, Started)]
    assert started.model.path.name == "alpha.fake" and loaded_name(host) == "alpha.fake"


def test_without_jit_a_model_that_is_not_loaded_is_an_error_with_a_code(make_host):
    host = make_host(resolver=resolver, jit=False)
    host.load_sync(fake_spec("alpha.fake"), "fake")
    rec = Recorder()
    handle = host.submit(GenerateJob(req(), model="beta"), rec)
    assert handle.wait(5)
    (failed,) = [e for e in rec.events if isinstance(e, JobFailed)]
    assert failed.code == "model_not_found" and "JIT" in failed.error_message
    assert not failed.after_output and loaded_name(host) == "alpha.fake"


def test_an_unknown_model_and_no_model_are_model_not_found(make_host):
    host = make_host(resolver=resolver)
    for model in ("gamma", None):
        rec = Recorder()
        handle = host.submit(GenerateJob(req(), model=model), rec)
        assert handle.wait(5) and handle.error_code == "model_not_found"
        assert isinstance(rec.events[-1], JobFailed) and not any(isinstance(e, Started) for e in rec.events)


def test_a_prompt_longer_than_the_context_fails_before_it_starts(make_host):
    host = make_host()
    host.load_sync(fake_spec(n_ctx=16), "fake")
    rec = Recorder()
    handle = host.submit(GenerateJob(req(" ".join(["word"] * 40))), rec)
    assert handle.wait(5)
    assert [type(e) for e in rec.events] == [JobFailed]  # no Started, no chunk
    failed = rec.events[0]
    assert failed.code == "context_length_exceeded"
    assert failed.details["prompt_tokens"] == 40 and failed.details["n_ctx"] == 16
    assert host.state.status == "ready"


def test_a_failure_after_output_says_so(make_host):
    host = make_host(raise_on_token=2)
    host.load_sync(fake_spec(), "fake")
    rec = Recorder()
    handle = host.submit(GenerateJob(req(max_tokens=10)), rec)
    assert handle.wait(5)
    kinds = [type(e) for e in rec.events]
    assert kinds[0] is Started and kinds.count(ChunkEvent) == 2 and kinds[-1] is JobFailed
    assert rec.events[-1].after_output and rec.events[-1].code == "engine_error"


def test_count_job_gives_prompt_tokens_and_context(make_host):
    host = make_host(resolver=resolver)
    handle = host.submit(CountJob(req("one two three"), model="alpha"))
    assert handle.wait(5) and handle.error is None
    assert handle.result == TokenCount(prompt_tokens=3, n_ctx=64)


def test_full_queue_says_when_to_retry_and_a_cancelled_wait_frees_its_place(make_host):
    host = make_host(tok_s=20, queue_size=2)
    host.load_sync(fake_spec(), "fake")
    running = host.submit(GenerateJob(req(max_tokens=40)))
    assert wait_until(lambda: host.state.status == "generating", 5)
    waiting = [host.submit(GenerateJob(req())) for _ in range(2)]
    with pytest.raises(HostBusy) as busy:
        host.submit(GenerateJob(req()))
    assert busy.value.code == "busy" and 1 <= busy.value.retry_after <= 60
    waiting[0].cancel()
    assert host.queue_depth == 1
    third = host.submit(GenerateJob(req()))  # the cancelled job's place, at once
    running.cancel()
    assert all(h.wait(10) for h in (running, *waiting, third))
    assert waiting[0].error_code == "cancelled" and third.error is None


def test_an_idle_model_is_unloaded_after_the_time_to_live(make_host):
    engines: list[FakeEngine] = []
    host = make_host(engines, idle_ttl_s=0.3)
    host.load_sync(fake_spec(), "fake")
    handle = host.submit(GenerateJob(req()))
    assert handle.wait(5)
    t0 = time.monotonic()
    assert wait_until(lambda: host.state.model is None, 5)
    assert time.monotonic() - t0 >= 0.2 and engines[0].unloads == 1 and host.state.status == "idle"
