"""Host fixtures: a FakeEngine registry, a host that is always shut down, an event recorder."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.registry import EngineRegistry
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import LoadJob, ModelNotFound
from app.core.runtime.pool import ModelPool
from app.core.runtime.preflight import PreflightResult
from tests.fixtures.fake_engine import FakeEngine, registry_with_fake


def no_preflight(spec, fmt, plan_check):
    return PreflightResult()


class Recorder:
    """A sink that records events with the thread that delivered them."""

    def __init__(self) -> None:
        self.events: list = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, event) -> None:
        with self.lock:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)


@pytest.fixture
def make_host():
    hosts: list[EngineHost] = []

    def make(
        engines: list[FakeEngine] | None = None,
        *,
        queue_size: int = 8,
        preflight=no_preflight,
        calibration=None,
        resolver=None,
        jit: bool = True,
        idle_ttl_s: float | None = None,
        **engine_kwargs,
    ) -> EngineHost:
        host = EngineHost(
            registry_with_fake(engines, **engine_kwargs),
            queue_size=queue_size,
            preflight=preflight,
            calibration=calibration,
            name="test-engine-host",
            resolver=resolver,
            jit=jit,
            idle_ttl_s=idle_ttl_s,
        )
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        assert host.shutdown(5.0), "the host thread did not stop"


def fake_spec(name: str = "model.fake", n_ctx: int = 4096) -> LoadSpec:
    return LoadSpec(path=Path("/nonexistent") / name, n_ctx=n_ctx)


# -- the pool: a model per name, each a small file in a folder -------------------------------------------


class NameResolver:
    """name → a file in `folder` (`<name>.<ext>`), loaded as `fmt`, as the library's resolver would."""

    def __init__(self, folder: Path, fmt: str = "fake", ext: str = "fake") -> None:
        self.folder, self.fmt, self.ext = folder, fmt, ext

    def path_of(self, name: str) -> Path:
        path = self.folder / f"{name}.{self.ext}"
        if not path.exists():
            raise ModelNotFound(f"no model {name}")
        return path

    def __call__(self, name: str) -> LoadJob:
        return LoadJob(spec=LoadSpec(path=self.path_of(name), n_ctx=512), format=self.fmt)


def registry(engines: list[FakeEngine], fmt: str = "fake", **kwargs) -> EngineRegistry:
    reg = EngineRegistry()

    def make() -> FakeEngine:
        engines.append(FakeEngine(**kwargs))
        return engines[-1]

    reg.register(fmt, "fake engine", make)
    return reg


@pytest.fixture
def make_pool():
    pools: list[ModelPool] = []

    def make(folder: Path, names=("a", "b", "c"), *, fmt="fake", ext="fake", engines=None, files=None, **kw):
        for name in names:
            path = folder / f"{name}.{ext}"
            if files is not None:
                shutil.copy(files, path)
            else:
                path.write_text(name)
        engine_kwargs = {k: kw.pop(k) for k in ("tok_s", "script", "fail_on_load", "load_delay_s") if k in kw}
        pool = ModelPool(
            registry(engines if engines is not None else [], fmt, **engine_kwargs),
            resolver=NameResolver(folder, fmt, ext),  # type: ignore[arg-type]
            **kw,
        )
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        assert pool.shutdown(5.0), "a host thread did not stop"
