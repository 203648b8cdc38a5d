"""Embed and rerank jobs on the EngineHost (T40): a cancel stops one between two inputs (documents) and the
next job starts at once; an input over the context fails the job with the field named, before any input is
embedded."""

from __future__ import annotations

import time

from app.core.runtime.jobs import EmbedJob, JobFailed, RerankJob
from tests.core.runtime.conftest import Recorder, fake_spec
from tests.fixtures.fake_engine import FakeEngine
from tests.helpers import wait_until


def test_a_cancelled_embed_job_stops_between_inputs_and_frees_the_host(make_host):
    engines: list[FakeEngine] = []
    host = make_host(engines, embed_delay_s=0.02)
    host.load_sync(fake_spec(), "fake")
    record = Recorder()
    long = host.submit(EmbedJob([f"input {i}" for i in range(500)]), record)  # 10 s uncancelled
    engine = engines[0]
    assert wait_until(lambda: engine.embedded >= 3, 5)
    following = host.submit(EmbedJob(["warm fire"]))
    t0 = time.perf_counter()
    long.cancel()
    assert following.wait(5)
    assert time.perf_counter() - t0 < 0.5  # one input's 20 ms, and the next job's
    assert long.error_code == "cancelled" and engine.embedded < 100
    (failed,) = [e for e in record.events if isinstance(e, JobFailed)]
    assert failed.code == "cancelled" and failed.details["done"] < 100 and failed.details["total"] == 500
    assert len(following.result.vectors) == 1


def test_an_embed_job_with_an_input_over_the_context_fails_before_embedding_any(make_host):
    engines: list[FakeEngine] = []
    host = make_host(engines)
    host.load_sync(fake_spec(n_ctx=64), "fake")
    record = Recorder()
    handle = host.submit(EmbedJob(["fine"] * 10 + ["w " * 65]), record)
    assert handle.wait(5)
    (failed,) = [e for e in record.events if isinstance(e, JobFailed)]
    assert failed.code == "context_length_exceeded" and failed.details["param"] == "input"
    assert failed.details["index"] == 10 and engines[0].embedded == 0
    following = host.submit(EmbedJob(["fine"]))
    assert following.wait(5) and following.error is None and engines[0].embedded == 1


def test_a_cancelled_rerank_job_stops_between_documents_and_frees_the_host(make_host):
    engines: list[FakeEngine] = []
    host = make_host(engines, embed_delay_s=0.02)
    host.load_sync(fake_spec(), "fake")
    record = Recorder()
    long = host.submit(RerankJob("warm fire", [f"document {i}" for i in range(500)]), record)  # 10 s uncancelled
    engine = engines[0]
    assert wait_until(lambda: engine.ranked >= 3, 5)
    following = host.submit(RerankJob("warm fire", ["a warm fire", "cold"]))
    long.cancel()
    assert following.wait(5) and following.result.scores == [1.0, 0.0]
    (failed,) = [e for e in record.events if isinstance(e, JobFailed)]
    assert failed.code == "cancelled" and failed.details["done"] < 100 and failed.details["total"] == 500
