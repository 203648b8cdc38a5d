"""EngineHost with the FakeEngine: ordering, states, cancel latency, busy queue, failures, shutdown."""

from __future__ import annotations

import itertools
import statistics
import threading
import time

import pytest

from app.core.engines.base import GenerateRequest, SamplingParams
from app.core.errors import HearthError
from app.core.models.calibration import CalibrationStore
from app.core.runtime import calibrate
from app.core.runtime.calibrate import MIN_CALIBRATION_PROMPT_TOKENS
from app.core.runtime.jobs import (
    ChunkEvent,
    EmbedJob,
    GenerateJob,
    HostBusy,
    HostClosed,
    JobDone,
    JobFailed,
    JobHandle,
    UnloadJob,
)
from app.core.runtime.preflight import PreflightResult
from tests.core.runtime.conftest import Recorder, fake_spec
from tests.helpers import ctrl_c_on_wait, wait_until


def req(prompt: str = "tell me a story", max_tokens: int | None = 5, **sampling) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens, **sampling))


def statuses(states) -> list[str]:
    out: list[str] = []
    for s in states:
        if not out or out[-1] != s.status:
            out.append(s.status)
    return out


def test_jobs_run_in_order_and_states_follow(make_host):
    host = make_host(script="one two three four")
    states = []
    host.state_changed.connect(states.append)
    order: list[str] = []
    host.load_sync(fake_spec(), "fake")
    handles = [
        host.submit(
            GenerateJob(req(f"prompt {i}"), source=f"s{i}"),
            lambda e, i=i: order.append(f"s{i}") if isinstance(e, JobDone) else None,
        )
        for i in range(3)
    ]
    for h in handles:
        assert h.wait(5)
    assert order == ["s0", "s1", "s2"]
    assert [h.result.text for h in handles] == ["one two three four"] * 3
    assert statuses(states) == ["loading", "ready", "generating", "ready", "generating", "ready", "generating", "ready"]
    generating = [s for s in states if s.status == "generating"]
    # One loop for every engine: the queue's depth is reported as it drains, each time under the running job.
    assert [source for source, _ in itertools.groupby(s.source for s in generating)] == ["s0", "s1", "s2"]
    assert generating[-1].queue_depth == 0
    # An engine that cannot batch has one slot, busy while it generates.
    assert {(s.slots_total, s.slots_busy) for s in generating} == {(1, 1)}
    assert (host.state.slots_total, host.state.slots_busy) == (1, 0)
    assert host.state.status == "ready" and host.state.model is not None
    assert host.state.model.format == "fake"


def test_sink_is_called_on_the_host_thread(make_host):
    host = make_host()
    host.load_sync(fake_spec(), "fake")
    rec = Recorder()
    handle = host.submit(GenerateJob(req()), rec)
    assert handle.wait(5)
    assert rec.threads == {"test-engine-host"}
    assert isinstance(rec.events[-1], JobDone)
    chunks = [e.chunk for e in rec.events if isinstance(e, ChunkEvent)]
    assert chunks[-1].finish_reason == "length" and chunks[-1].stats.generated_tokens == 5
    assert "".join(c.text for c in chunks) == handle.result.text


def test_generate_sync_and_unload(make_host):
    engines = []
    host = make_host(engines, script="alpha beta")
    host.load_sync(fake_spec(), "fake")
    seen = []
    text, final = host.generate_sync(req(), on_chunk=lambda c: seen.append(threading.current_thread().name))
    assert text == "alpha beta" and final.finish_reason == "stop"
    assert set(seen) == {"test-engine-host"}
    h = host.submit(UnloadJob())
    assert h.wait(5) and h.error is None
    assert host.state.status == "idle" and host.state.model is None
    assert (host.state.slots_total, host.state.slots_busy) == (0, 0)
    assert engines[0].unloads == 1
    with pytest.raises(HearthError, match="no model is loaded"):
        host.generate_sync(req())


def _cancel_after_first_chunk(host, job):
    first = threading.Event()
    handle = host.submit(job, lambda e: first.set() if isinstance(e, ChunkEvent) else None)
    assert first.wait(5)
    return handle


def test_cancel_during_decode_frees_host_within_a_token(make_host):
    host = make_host(tok_s=20)  # 50 ms a token; 1000 tokens would take 50 s
    host.load_sync(fake_spec(), "fake")
    long = _cancel_after_first_chunk(host, GenerateJob(req(max_tokens=1000)))
    started = threading.Event()
    nxt = host.submit(GenerateJob(req(max_tokens=1)), lambda e: started.set())
    t0 = time.perf_counter()
    long.cancel()
    assert started.wait(5)
    latency = time.perf_counter() - t0
    assert latency < 0.2, f"next job started {latency * 1000:.0f} ms after cancel"
    assert long.wait(1) and long.result.finish_reason == "cancelled"
    assert long.result.final.stats.generated_tokens < 1000
    assert nxt.wait(5) and nxt.result.final.finish_reason == "length"


def test_cancel_during_prefill_frees_host_within_a_batch(make_host):
    # 400 prompt words in batches of 8 at 100 ms each: the prefill alone would take 5 s.
    host = make_host(prompt_batch=8, prompt_batch_delay_s=0.1)
    host.load_sync(fake_spec(), "fake")
    states = []
    host.state_changed.connect(states.append)
    long = host.submit(GenerateJob(req(" ".join(["word"] * 400))))
    assert wait_until(lambda: host.state.status == "generating", 5)
    time.sleep(0.15)
    started = threading.Event()
    host.submit(
        GenerateJob(GenerateRequest(prompt="short", sampling=SamplingParams(max_tokens=1))), lambda e: started.set()
    )
    t0 = time.perf_counter()
    long.cancel()
    assert started.wait(5)
    assert time.perf_counter() - t0 < 0.2
    assert long.wait(1)
    final = long.result.final
    assert final.finish_reason == "cancelled" and final.stats.generated_tokens == 0
    assert 0 < final.stats.prompt_tokens_evaluated < 400


def test_full_queue_raises_host_busy(make_host):
    host = make_host(queue_size=2, tok_s=50)
    host.load_sync(fake_spec(), "fake")
    running = _cancel_after_first_chunk(host, GenerateJob(req(max_tokens=1000)))
    queued = [host.submit(GenerateJob(req())) for _ in range(2)]
    assert host.queue_depth == 2
    with pytest.raises(HostBusy):
        host.submit(GenerateJob(req()))
    running.cancel()
    for h in queued:
        assert h.wait(5) and h.error is None
    host.submit(GenerateJob(req())).wait(5)  # room again


def test_cancelled_queued_job_is_skipped(make_host):
    engines = []
    host = make_host(engines, tok_s=50)
    host.load_sync(fake_spec(), "fake")
    running = _cancel_after_first_chunk(host, GenerateJob(req(max_tokens=1000)))
    rec = Recorder()
    skipped = host.submit(GenerateJob(req("never run me")), rec)
    after = host.submit(GenerateJob(req("run me")))
    skipped.cancel()
    running.cancel()
    assert after.wait(5) and after.error is None
    assert skipped.done.is_set() and skipped.started is False
    assert skipped.error and "cancelled" in skipped.error
    assert not any(isinstance(e, ChunkEvent) for e in rec.events)
    assert isinstance(rec.events[-1], JobFailed)
    prompts = [r.prompt for r in engines[0].generations]
    assert "never run me" not in prompts and "run me" in prompts


def test_engine_exception_mid_generation_leaves_host_usable(make_host):
    engines = []
    host = make_host(engines, raise_on_token=3)
    host.load_sync(fake_spec(), "fake")
    rec = Recorder()
    bad = host.submit(GenerateJob(req(max_tokens=10)), rec)
    assert bad.wait(5)
    assert isinstance(rec.events[-1], JobFailed) and "token 3" in rec.events[-1].error_message
    assert sum(isinstance(e, ChunkEvent) for e in rec.events) == 3
    assert host.state.status == "ready"
    engines[0].raise_on_token = None
    text, final = host.generate_sync(req(max_tokens=4))
    assert final.finish_reason == "length" and len(text.split()) == 4


def test_logprobs_from_an_engine_without_them_fail_as_unsupported_before_anything_runs(make_host):
    engines = []
    host = make_host(engines, script="a b")
    host.load_sync(fake_spec(), "fake")
    engines[0].capabilities = engines[0].capabilities.model_copy(update={"logprobs": False})
    rec = Recorder()
    handle = host.submit(GenerateJob(req(logprobs=0)), rec)
    assert handle.wait(5)
    assert [type(e) for e in rec.events] == [JobFailed] and rec.events[0].code == "unsupported"
    assert "logprobs" in rec.events[0].error_message and engines[0].generations == []
    assert host.generate_sync(req())[1].finish_reason == "stop"


def test_failed_load_sets_error_state_then_a_good_load_works(make_host):
    host = make_host(fail_on_load=lambda path: path.name == "broken.fake")
    states = []
    host.state_changed.connect(states.append)
    with pytest.raises(HearthError, match=r"broken\.fake"):
        host.load_sync(fake_spec("broken.fake"), "fake")
    assert host.state.status == "error" and "broken.fake" in host.state.error
    with pytest.raises(HearthError, match="no model is loaded"):
        host.generate_sync(req())
    info = host.load_sync(fake_spec("good.fake"), "fake")
    assert info.path.name == "good.fake"
    assert host.state.status == "ready" and host.state.error is None
    assert statuses(states) == ["loading", "error", "loading", "ready"]
    assert host.generate_sync(req(max_tokens=2))[1].finish_reason == "length"


def test_loading_another_model_unloads_the_first(make_host):
    engines = []
    host = make_host(engines)
    host.load_sync(fake_spec("a.fake"), "fake")
    host.load_sync(fake_spec("b.fake"), "fake")
    assert len(engines) == 2 and engines[0].unloads == 1 and engines[0].info is None
    assert host.state.model.path.name == "b.fake"


def test_unknown_format_is_an_error_state(make_host):
    host = make_host()
    with pytest.raises(HearthError, match="no engine for gguf"):
        host.load_sync(fake_spec("x.gguf"), "gguf")
    assert host.state.status == "error"


def test_embed_job(make_host):
    host = make_host()
    host.load_sync(fake_spec(), "fake")
    h = host.submit(EmbedJob(["warm fire", "warm fire", "cold river"]))
    assert h.wait(5)
    a, b, c = h.result.vectors
    assert a == b and a != c
    assert h.result.prompt_tokens == 6


def test_shutdown_with_jobs_queued_returns_promptly(make_host):
    host = make_host(tok_s=20)
    host.load_sync(fake_spec(), "fake")
    running = _cancel_after_first_chunk(host, GenerateJob(req(max_tokens=1000)))
    queued = [host.submit(GenerateJob(req(max_tokens=1000))) for _ in range(5)]
    t0 = time.perf_counter()
    assert host.shutdown(5.0)
    assert time.perf_counter() - t0 < 1.0
    assert running.done.is_set() and running.result.finish_reason == "cancelled"
    assert all(h.done.is_set() and h.error for h in queued)
    with pytest.raises(HostClosed):
        host.submit(GenerateJob(req()))


def test_calibration_records_measured_vs_predicted(make_host, tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "machine_load", lambda: (0.5, 0.5))  # quiet, whatever this machine runs
    store = CalibrationStore(tmp_path / "calibration.json")

    def preflight(spec, fmt, plan_check):
        return PreflightResult(predicted_decode_tok_s=123.0, backend="cpu")

    host = make_host(preflight=preflight, calibration=store, tok_s=0)
    host.load_sync(fake_spec("speedy.fake"), "fake")
    host.generate_sync(req(max_tokens=20))
    host.generate_sync(req(max_tokens=3))  # too short to measure: not recorded
    runs = store.runs("cpu")
    assert len(runs) == 1
    assert runs[0].model == "speedy.fake" and runs[0].predicted_decode == 123.0
    assert runs[0].measured_decode > 0


def test_calibration_records_predicted_prefill_beside_decode(make_host, tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "machine_load", lambda: (0.5, 0.5))  # quiet, whatever this machine runs
    store = CalibrationStore(tmp_path / "calibration.json")

    def preflight(spec, fmt, plan_check):
        return PreflightResult(predicted_decode_tok_s=123.0, backend="cpu", predicted_prefill_tok_s=400.0)

    host = make_host(preflight=preflight, calibration=store, tok_s=0)
    host.load_sync(fake_spec("speedy.fake"), "fake")
    long_prompt = " ".join(f"w{i}" for i in range(MIN_CALIBRATION_PROMPT_TOKENS + 10))
    _, result = host.generate_sync(req(long_prompt, max_tokens=20))
    host.generate_sync(req("a short prompt", max_tokens=20))  # decode counts, a few prompt tokens do not
    first, second = store.runs("cpu")
    assert first.predicted_prefill == 400.0 and first.measured_prefill == pytest.approx(result.stats.prompt_tok_s)
    assert first.measured_prefill > 0 and first.predicted_decode == 123.0
    assert second.predicted_prefill == 0.0 and second.measured_prefill == 0.0 and second.measured_decode > 0
    corr = store.correction("cpu")
    assert corr.prefill == pytest.approx(first.measured_prefill / 400.0)
    assert corr.decode == pytest.approx(statistics.median(r.measured_decode / 123.0 for r in (first, second)))


def test_prefix_reuse_is_reported(make_host):
    host = make_host(script="a b c")
    host.load_sync(fake_spec(), "fake")
    _, first = host.generate_sync(req("one two three four five"))
    assert first.stats.prompt_tokens_evaluated == 5
    _, second = host.generate_sync(req("one two three four five a b c six seven"))
    assert second.stats.prompt_tokens == 10 and second.stats.prompt_tokens_evaluated == 2


def test_ctrl_c_in_generate_sync_cancels_the_job_then_reraises(make_host, monkeypatch):
    host = make_host(tok_s=20)  # 1000 tokens would take 50 s
    host.load_sync(fake_spec(), "fake")
    first = threading.Event()
    hit = ctrl_c_on_wait(monkeypatch, first)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        host.generate_sync(req(max_tokens=1000), on_chunk=lambda c: first.set())
    assert time.perf_counter() - t0 < 5
    (handle,) = hit
    # It returned only once the host had finished the job: the stopped reply is there, and the host is free.
    assert handle.done.is_set() and handle.cancelled
    assert handle.result.finish_reason == "cancelled"
    assert 0 < handle.result.final.stats.generated_tokens < 1000 and handle.result.text
    assert host.state.status == "ready"
    monkeypatch.undo()
    assert host.generate_sync(req(max_tokens=2))[1].finish_reason == "length"


def test_ctrl_c_in_load_sync_cancels_the_load(make_host, monkeypatch):
    # Ctrl-C lands during a slow preflight; the host checks cancel before the engine loads.
    started = threading.Event()

    def preflight(spec, fmt, plan_check):
        started.set()
        time.sleep(0.3)
        return PreflightResult()

    host = make_host(preflight=preflight)
    ctrl_c_on_wait(monkeypatch, started)
    with pytest.raises(KeyboardInterrupt):
        host.load_sync(fake_spec(), "fake")
    assert host.state.status == "error" and "cancelled" in host.state.error


def _handle_that_stops(delay: float) -> JobHandle:
    """A handle whose 'host' finishes it `delay` seconds after it is cancelled."""
    handle = JobHandle(job=UnloadJob())

    def host() -> None:
        handle.cancel_event.wait(5)
        time.sleep(delay)
        handle.done.set()

    threading.Thread(target=host, daemon=True).start()
    return handle


def test_wait_or_cancel_without_grace_waits_for_the_job_through_another_ctrl_c(monkeypatch):
    now = threading.Event()
    now.set()
    hit = ctrl_c_on_wait(monkeypatch, now, times=2)
    handle = _handle_that_stops(0.3)
    with pytest.raises(KeyboardInterrupt):
        handle.wait_or_cancel(grace=None)
    assert len(hit) == 2 and handle.cancelled and handle.done.is_set()


def test_wait_or_cancel_with_grace_lets_another_ctrl_c_out(monkeypatch):
    now = threading.Event()
    now.set()
    hit = ctrl_c_on_wait(monkeypatch, now, times=2)
    handle = _handle_that_stops(0.3)
    with pytest.raises(KeyboardInterrupt):
        handle.wait_or_cancel(grace=30)
    assert len(hit) == 2 and handle.cancelled and not handle.done.is_set()
    assert handle.wait_or_cancel(5)


def test_wait_or_cancel_times_out_without_cancelling():
    handle = _handle_that_stops(0)
    t0 = time.perf_counter()
    assert handle.wait_or_cancel(0.25) is False
    assert 0.2 <= time.perf_counter() - t0 < 2 and not handle.cancelled


class MarkerSpy:
    """Stands in for an engine's NativeActivity: records begin/end in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin(self, phase: str) -> None:
        self.calls.append(phase)

    def end(self) -> None:
        self.calls.append("end")


def test_a_decode_run_is_marked_in_flight_once_and_cleared(make_host):
    """The host marks native decode work for crash attribution: one marker per run, not per token."""
    from tests.fixtures.fake_engine import FakeEngine

    engines: list[FakeEngine] = []
    host = make_host(engines, script="one two three four five six")
    host.load_sync(fake_spec(), "fake")
    spy = MarkerSpy()
    engines[0].native_activity = spy  # type: ignore[attr-defined]
    for i in range(2):
        h = host.submit(GenerateJob(req(f"p{i}", max_tokens=6)))
        assert h.wait(5) and h.error is None
    assert spy.calls == ["decoding", "end", "decoding", "end"]
