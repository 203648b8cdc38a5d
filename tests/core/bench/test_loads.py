"""A benchmark leaves the loaded models as it found them: the chat's model keeps its context and slots, on
the app's model pool and on a single host."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.bench.loads import LoadsBefore
from app.core.bench.runner import HostRunner
from app.core.bench.workload import Workload
from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import LoadJob
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from tests.fixtures.fake_engine import registry_with_fake
from tests.server.conftest import fake_library

SMALL = Workload(prompt_lens=[20, 40], gen_len=6, concurrency=[1, 2], runs=1, warmup=0)


@pytest.fixture
def library(tmp_path):
    library = fake_library(tmp_path / "lib")
    yield library
    library.close()


@pytest.fixture
def pool(library):
    pool = ModelPool(
        registry_with_fake(tok_s=400), resolver=ModelResolver(library, machine=lambda: None), name="t-pool"
    )
    yield pool
    assert pool.shutdown(5)


def chat_load(host, library, name: str, n_ctx: int, slots: int) -> LoadSpec:
    """Load `name` as the chat does (taking the focus), and return its spec."""
    spec = LoadSpec(path=Path(library.find(name).path), n_ctx=n_ctx, slots=slots)
    host.wait_for(host.submit(LoadJob(spec=spec, format="fake")), 10)
    return spec


def bench(host, library, name: str, workload: Workload = SMALL, ref: bool = True):
    model = library.find(name)
    load = LoadSpec(path=Path(model.path), n_ctx=workload.target_ctx)
    runner = HostRunner(
        host, load, "fake", workload, plan_check=False, model_ref=model.id if ref else None, model_name=model.name
    )
    return runner, runner.run()


def loaded(host) -> dict[str, tuple[int, int, bool]]:
    """Each loaded model's file name: its context, the slots its load asked for, whether it is in focus."""
    return {
        Path(r.key).name: (r.state.model.n_ctx, r.state.load.slots, r.focus)
        for r in host.residents()
        if r.state.model is not None and r.state.load is not None
    }


def test_benchmark_the_chats_load_is_unchanged_after_a_run(pool, library):
    """The chat's model loaded with more context than the workload needs is measured as it is."""
    chat_load(pool, library, "alpha", 8192, 4)
    runner, report = bench(pool, library, "alpha")
    assert runner.reused
    assert loaded(pool) == {"alpha.fake": (8192, 4, True)}
    assert report.engine.flags.n_ctx == 8192 and report.model.name == "alpha"
    assert any("nothing was reloaded" in n for n in report.notes)


def test_a_workload_needing_more_context_restores_the_chats_load_and_says_so(pool, library):
    chat_load(pool, library, "alpha", 48, 4)  # shorter than the 40-token prompts and their replies need
    runner, report = bench(pool, library, "alpha")
    assert not runner.reused and report.engine.flags.n_ctx == SMALL.target_ctx  # measured at its own load
    assert loaded(pool) == {"alpha.fake": (48, 4, True)}
    assert "Restored the chat's model: 48 context, 1 slot." in report.notes


def test_another_model_runs_beside_the_chats_and_is_unloaded_after(pool, library):
    chat_load(pool, library, "alpha", 8192, 4)
    _, report = bench(pool, library, "beta")
    assert report.model.name == "beta" and report.cells and all(c.completed for c in report.cells)
    assert loaded(pool) == {"alpha.fake": (8192, 4, True)}  # beta gone, alpha untouched and in focus


def test_on_a_single_host_the_chats_model_is_loaded_again(library):
    host = EngineHost(registry_with_fake(tok_s=400), name="t-single")
    try:
        chat_load(host, library, "alpha", 8192, 4)
        _, report = bench(host, library, "beta", ref=False)
        assert report.model.name == "beta"
        assert loaded(host) == {"alpha.fake": (8192, 4, True)}
        assert any(n.startswith("Restored the chat's model: 8,192 context") for n in report.notes)
    finally:
        host.shutdown(5)


def test_nothing_loaded_before_nothing_loaded_after(pool, library):
    bench(pool, library, "alpha")
    assert loaded(pool) == {} and LoadsBefore.look(pool, Path(library.find("alpha").path)).chat is None
