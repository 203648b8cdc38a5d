"""The host runner on the FakeEngine: a report with every cell, validated against the published schema,
saved and read back; progress; cancel (a flag or Ctrl-C) leaves no report; errors are clear."""

from __future__ import annotations

import json
import threading

import pytest

from app.core.bench.driver import BenchCancelled, BenchError
from app.core.bench.report import BenchReport, report_schema, schema_text
from app.core.bench.runner import HostRunner
from app.core.bench.store import BenchReportError, BenchStore
from app.core.bench.workload import Workload
from app.core.resources import resource_path
from app.core.runtime.jobs import JobHandle
from tests.core.bench.conftest import TINY, fake_load

SCHEMA_FILE = resource_path("schemas", "bench-report.schema.json")


def validate_against_schema(report_json: str) -> None:
    """Validate with a JSON Schema validator independent of pydantic (jsonschema_rs, from the test extra)."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema_rs.validator_for(schema).validate(json.loads(report_json))


def test_committed_schema_is_the_models():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), "run scripts/bench_schema.py"
    assert report_schema()["additionalProperties"] is False


def run_fake(fake_host, fake_model, workload: Workload = TINY, **kw) -> BenchReport:
    return HostRunner(fake_host, fake_load(fake_model, workload), "fake", workload, **kw).run()


def test_a_run_reports_every_cell_and_validates(fake_host, fake_model):
    seen = []
    report = run_fake(fake_host, fake_model, progress=seen.append)
    assert [(c.prompt_len, c.concurrency) for c in report.cells] == TINY.cells
    for cell in report.cells:
        assert cell.completed == cell.requests == cell.concurrency * TINY.runs
        for dist in (cell.ttft_s, cell.tpot_s, cell.e2e_s):
            assert dist is not None and dist.p50 <= dist.p95 <= dist.p99
        assert cell.prefill_tok_s and cell.decode_tok_s and cell.requests_per_s
        assert cell.output_tokens == TINY.gen_len
        assert abs(cell.prompt_tokens - cell.prompt_len) <= 0.25 * cell.prompt_len  # sized by the engine's count
        assert cell.cached_tokens <= 3  # each request starts with its own tag: nothing reused
    assert [p.prompt_len for p in report.shared_prefix] == [40, 80]
    for prefix in report.shared_prefix:  # the shared 30 tokens came from the cache on the warm request
        assert prefix.prefix_tokens == 30 and prefix.cached_tokens is not None and prefix.cached_tokens >= 25
    # Three requests submitted at once queue behind each other: the host runs one at a time.
    queued = report.cell(40, 3)
    assert queued and queued.queue_wait_s and queued.queue_wait_s.p99 > 0
    assert "queued" in report.engine.concurrency_mode and report.engine.flags.slots == 1
    assert report.weights.sha256 and len(report.weights.sha256) == 64 and report.weights.file_size == 12
    assert report.hardware["cpu"] and report.workload == TINY and report.runs == 2 and report.warmup_requests == 2
    assert [p.done for p in seen] == sorted(p.done for p in seen) and seen[-1].done == seen[-1].total
    text = report.to_json()
    validate_against_schema(text)
    assert BenchReport.from_json(text) == report


def test_store_saves_lists_and_loads(fake_host, fake_model, tmp_path):
    store = BenchStore(tmp_path / "bench")
    report = run_fake(fake_host, fake_model, Workload(prompt_lens=[20], gen_len=3, runs=1, warmup=0))
    first = store.save(report)
    second = store.save(report)  # the same id twice: both kept
    assert first != second and first.parent == second.parent == tmp_path / "bench"
    assert [s.path for s in store.list()] and {s.path for s in store.list()} == {first, second}
    assert store.load(first) == report and store.load(report.id) == report
    (tmp_path / "bench" / "junk.json").write_text('{"schema_version": 1}')
    assert len(store.list()) == 2  # an invalid file is skipped
    with pytest.raises(BenchReportError, match="not a valid benchmark report"):
        store.load(tmp_path / "bench" / "junk.json")
    assert not list((tmp_path / "bench").glob(".*.tmp"))  # atomic writes leave no temp files


def test_cancel_keeps_a_partial_report_of_what_was_measured(fake_host, fake_model):
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p)
        if p.done >= 3:
            cancel.set()

    slow = Workload(prompt_lens=[20, 40], gen_len=50, concurrency=[1, 4], runs=3, warmup=0)
    runner = HostRunner(fake_host, fake_load(fake_model, slow), "fake", slow, progress=progress, cancel=cancel)
    runner.tick_s = 0  # every token reported
    with pytest.raises(BenchCancelled) as got:
        runner.run()
    partial = got.value.partial
    assert partial is not None and partial.partial and partial.notes[0].startswith("partial: cancelled after 3")
    assert [(c.prompt_len, c.concurrency, c.completed) for c in partial.cells] == [(20, 1, 3)]  # not reached: absent
    validate_against_schema(partial.to_json())
    assert fake_host.queue_depth == 0 and fake_host.state.model is None  # queued requests skipped, model unloaded
    # Progress moved within requests (per token), not only per finished request, with a time left.
    steps = [p.step for p in seen]
    assert any("tokens generated" in s for s in steps) and any(s.startswith("reading the") for s in steps)
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and len(set(fractions)) > 3
    assert any(p.eta_s is not None and p.eta_s > 0 for p in seen)


def test_cancel_before_anything_was_measured_keeps_nothing(fake_host, fake_model):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(BenchCancelled) as got:
        run_fake(fake_host, fake_model, cancel=cancel)
    assert got.value.partial is None


def test_ctrl_c_cancels_the_running_request(fake_host, fake_model, monkeypatch):
    real = JobHandle.wait
    calls = []

    def wait(self, timeout=None):
        calls.append(self)
        if len(calls) == 40:
            raise KeyboardInterrupt
        return real(self, timeout)

    monkeypatch.setattr(JobHandle, "wait", wait)
    long = Workload(prompt_lens=[20], gen_len=400, runs=5)
    runner = HostRunner(fake_host, fake_load(fake_model, long), "fake", long, plan_check=False)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert runner.cancel.is_set() and calls[39].cancelled  # the request it interrupted (then the model unloads)


def test_a_concurrency_over_the_queue_is_a_clear_error(fake_host, fake_model):
    with pytest.raises(BenchError, match="do not fit the engine's queue"):
        run_fake(fake_host, fake_model, Workload(prompt_lens=[20], concurrency=[32]))


def test_a_model_that_fails_to_load_is_a_clear_error(fake_model):
    from app.core.errors import HearthError
    from app.core.runtime.engine_host import EngineHost
    from tests.fixtures.fake_engine import registry_with_fake

    host = EngineHost(registry_with_fake(fail_on_load="the file is broken"), name="test-bench-fail")
    try:
        with pytest.raises(HearthError, match="the file is broken"):
            run_fake(host, fake_model)
    finally:
        host.shutdown(5)
