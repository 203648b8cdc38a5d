"""Host fixtures: a FakeEngine registry, a host that is always shut down, an event recorder."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.fake import FakeEngine, registry_with_fake
from app.core.runtime.host import EngineHost
from app.core.runtime.preflight import PreflightResult


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
