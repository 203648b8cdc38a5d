"""What the pool promises whatever a request asks (issue 46): a pin holds, the cap on loaded models holds, and
a new load of a loaded model (a bigger context) is planned before the model is let go, so a refusal or a
failure leaves it loaded as it was, pin and all; and a JIT load grows its context only when a request needs it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.errors import EngineError
from app.core.engines.registry import EngineRegistry
from app.core.runtime.jobs import GenerateJob, LoadJob, UnloadJob
from app.core.runtime.pool import ModelPool
from app.core.runtime.preflight import check_gguf, planned_load
from tests.core.runtime.conftest import NameResolver
from tests.core.runtime.test_pool import loaded_names, req, simulated, small_machine
from tests.fixtures.fake_engine import FakeEngine
from tests.helpers import wait_until

GiB = 1 << 30


def resident(pool: ModelPool, name: str):
    [found] = [r for r in pool.residents() if Path(r.key).stem == name]
    return found


def test_the_cap_holds_when_the_loaded_models_are_pinned(make_pool, tmp_path):
    pool = make_pool(tmp_path, max_models=1)
    spec = NameResolver(tmp_path)("a").spec
    assert pool.submit(LoadJob(spec=spec, format="fake", pin=True)).wait(5)
    refused = pool.submit(GenerateJob(req(), model="b"))
    assert refused.wait(5) and refused.error_code == "model_limit"
    assert "at most 1 model" in (refused.error or "") and "pinned: a.fake" in (refused.error or "")
    wait_until(lambda: len(pool.residents()) == 1, 5)
    assert loaded_names(pool) == ["a"] and resident(pool, "a").pinned
    # Unpinned, it makes room as the cap says.
    assert pool.keep("a", pin=False)
    assert pool.submit(GenerateJob(req(), model="b")).wait(5)
    assert loaded_names(pool) == ["b"]


def test_an_unload_request_leaves_a_pinned_model_and_an_eject_does_not(make_pool, tmp_path):
    pool = make_pool(tmp_path)
    assert pool.submit(GenerateJob(req(), model="a")).wait(5)
    assert pool.keep("a", pin=True)
    refused = pool.submit(UnloadJob(model="a"))
    assert refused.wait(5) and refused.error_code == "model_pinned" and "unpin it first" in (refused.error or "")
    assert loaded_names(pool) == ["a"]
    ejected = pool.submit(UnloadJob(model="a", even_pinned=True))  # the person's own Eject in the app
    assert ejected.wait(5) and ejected.error is None
    assert pool.residents() == []


def _gguf_pool(make_pool, tmp_path, gguf: Path, room: float, registry_engines: list[FakeEngine], **kw):
    _, live = simulated(gguf, room, registry_engines)
    return make_pool(
        tmp_path, ("a", "b"), fmt="gguf", ext="gguf", files=gguf, engines=registry_engines, machine=live, **kw
    )


def test_a_bigger_context_that_does_not_fit_is_refused_before_the_model_is_let_go(make_pool, tmp_path, tiny_gguf_f16):
    engines: list[FakeEngine] = []
    pool = _gguf_pool(make_pool, tmp_path, tiny_gguf_f16, 1.5, engines)
    job = NameResolver(tmp_path, "gguf", "gguf")("a")
    assert pool.submit(dataclasses.replace(job, pin=True)).wait(10)
    before = resident(pool, "a").memory_bytes
    huge = dataclasses.replace(job, spec=job.spec.model_copy(update={"n_ctx": 1 << 20}))
    refused = pool.submit(huge)
    assert refused.wait(10) and refused.error_code == "does_not_fit", refused.error
    assert "will not fit" in (refused.error or "")
    a = resident(pool, "a")
    assert a.pinned and a.state.model is not None and a.state.model.n_ctx == 512
    assert a.memory_bytes == before
    assert [e.unloads for e in engines] == [0]  # never let go


def test_a_bigger_context_that_fits_is_what_the_pool_counts(make_pool, tmp_path, tiny_gguf_f16):
    engines: list[FakeEngine] = []
    pool = _gguf_pool(make_pool, tmp_path, tiny_gguf_f16, 64.0, engines)
    job = NameResolver(tmp_path, "gguf", "gguf")("a")
    assert pool.submit(dataclasses.replace(job, pin=True)).wait(10)
    small = resident(pool, "a").memory_bytes
    grown = job.spec.model_copy(update={"n_ctx": 4096})
    handle = pool.submit(dataclasses.replace(job, spec=grown))
    assert handle.wait(10) and handle.error is None, handle.error
    a = resident(pool, "a")
    planned = planned_load(check_gguf(grown.path), grown, small_machine(64 * GiB)).plan.estimate.total
    assert a.pinned and a.state.model is not None and a.state.model.n_ctx == 4096
    assert a.memory_bytes > small and abs(a.memory_bytes - planned) <= planned * 0.05


def test_a_reload_that_fails_loads_the_model_back_as_it_was(make_pool, tmp_path):
    engines: list[FakeEngine] = []
    failing = {"next": 0}  # how many of the next engines fail to load
    reg = EngineRegistry()

    def make() -> FakeEngine:
        engines.append(FakeEngine(fail_on_load="native failure" if failing["next"] > 0 else False))
        failing["next"] -= 1
        return engines[-1]

    reg.register("fake", "fake engine", make)
    (tmp_path / "a.fake").write_text("a")
    pool = ModelPool(reg, resolver=NameResolver(tmp_path))  # type: ignore[arg-type]
    try:
        job = NameResolver(tmp_path)("a")
        assert pool.submit(dataclasses.replace(job, pin=True)).wait(5)
        failing["next"] = 1
        bigger = dataclasses.replace(job, spec=job.spec.model_copy(update={"n_ctx": 2048}))
        handle = pool.submit(bigger)
        assert handle.wait(5) and handle.error is not None
        assert "native failure" in handle.error and "stays loaded as it was (context 512)" in handle.error
        a = resident(pool, "a")
        assert a.pinned and a.state.status == "ready" and a.state.model is not None and a.state.model.n_ctx == 512
        done = pool.submit(GenerateJob(req(), model="a"))
        assert done.wait(5) and done.error is None
    finally:
        assert pool.shutdown(5.0)


# -- a JIT load that grows ------------------------------------------------------------------------------


class GrowingResolver(NameResolver):
    def __call__(self, name: str) -> LoadJob:
        return LoadJob(spec=LoadSpec(path=self.path_of(name), n_ctx=64, slots=2), format=self.fmt, grow_to=1000)


def _long(words: int, max_tokens: int = 4) -> GenerateRequest:
    return GenerateRequest(prompt=" ".join(["w"] * words), sampling=SamplingParams(max_tokens=max_tokens))


def test_a_jit_load_grows_only_when_a_request_needs_it(tmp_path):
    engines: list[FakeEngine] = []
    reg = EngineRegistry()
    reg.register("fake", "fake engine", lambda: engines.append(FakeEngine(script="ok")) or engines[-1])
    (tmp_path / "a.fake").write_text("a")
    pool = ModelPool(reg, resolver=GrowingResolver(tmp_path))  # type: ignore[arg-type]
    try:
        short = pool.submit(GenerateJob(_long(10), model="a"))
        assert short.wait(5) and short.error is None
        assert resident(pool, "a").state.model.n_ctx == 64 and len(engines) == 1  # as loaded: it fit
        long = pool.submit(GenerateJob(_long(300, max_tokens=10), model="a"))
        assert long.wait(5) and long.error is None, long.error
        load = resident(pool, "a").state.load
        assert load is not None and load.n_ctx == 1000 and load.slots == 2  # at most its ceiling
        assert engines[0].unloads == 1 and len(engines) == 2
        again = pool.submit(GenerateJob(_long(300, max_tokens=10), model="a"))
        assert again.wait(5) and again.error is None and len(engines) == 2  # grown once, not per request
    finally:
        assert pool.shutdown(5.0)


def test_a_load_without_a_ceiling_never_grows(make_pool, tmp_path):
    pool = make_pool(tmp_path, ("a",))
    refused = pool.submit(GenerateJob(_long(600), model="a"))  # NameResolver loads at 512, grow_to 0
    assert refused.wait(5) and refused.error_code == "context_length_exceeded"
    assert resident(pool, "a").state.model.n_ctx == 512


def test_a_prompt_the_load_cannot_grow_for_is_refused_with_the_reason_and_the_model_stays(tmp_path):
    class Small(FakeEngine):
        """Loads only its first context: every bigger one fails, as a load past memory would."""

        def load(self, spec: LoadSpec):
            if spec.n_ctx > 64:
                raise EngineError("no room for it")
            return super().load(spec)

    reg = EngineRegistry()
    reg.register("fake", "fake engine", lambda: Small(script="ok"))
    (tmp_path / "a.fake").write_text("a")
    pool = ModelPool(reg, resolver=GrowingResolver(tmp_path))  # type: ignore[arg-type]
    try:
        assert pool.submit(GenerateJob(_long(10), model="a")).wait(5)
        refused = pool.submit(GenerateJob(_long(300, max_tokens=10), model="a"))
        assert refused.wait(5) and refused.error_code == "does_not_fit", refused.error
        assert "the prompt has 300 tokens" in (refused.error or "") and "no room for it" in (refused.error or "")
        a = resident(pool, "a")
        assert a.state.status == "ready" and a.state.model is not None and a.state.model.n_ctx == 64
        fits = pool.submit(GenerateJob(_long(10), model="a"))
        assert fits.wait(5) and fits.error is None
    finally:
        assert pool.shutdown(5.0)
