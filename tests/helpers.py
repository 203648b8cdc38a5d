"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import NoReturn

import pytest

from app.core.runtime.jobs import JobHandle


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    """Poll `predicate` until true or timeout; for tests that watch state set on another thread."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def ctrl_c_on_wait(monkeypatch, when: threading.Event, times: int = 1) -> list[JobHandle]:
    """Make JobHandle.wait raise KeyboardInterrupt, as Ctrl-C in the waiting thread would, the next
    `times` calls after `when` is set. Returns the handles it interrupted."""
    real = JobHandle.wait
    hit: list[JobHandle] = []

    def wait(self, timeout=None):
        if len(hit) < times and when.is_set():
            hit.append(self)
            raise KeyboardInterrupt
        return real(self, timeout)

    monkeypatch.setattr(JobHandle, "wait", wait)
    return hit


# CI sets this (.ci/run): there, a native engine that cannot be imported fails the suite instead of skipping.
REQUIRE_NATIVE_ENV = "HEARTH_REQUIRE_NATIVE"


def native_missing(exc: BaseException | str) -> NoReturn:
    """Skip a test that needs llama.cpp when it cannot be imported here, or fail it where it must be."""
    if os.environ.get(REQUIRE_NATIVE_ENV) == "1":
        pytest.fail(f"llama_cpp must import here ({REQUIRE_NATIVE_ENV}=1), but: {exc!r}", pytrace=False)
    pytest.skip(f"llama_cpp is not importable: {exc!r}")


def require_llama_cpp():
    """The llama_cpp module, imported as the app imports it (a broken native build raises OSError)."""
    try:
        from app.core.native import import_native

        return import_native("llama_cpp")
    except Exception as exc:
        native_missing(exc)
