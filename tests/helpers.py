"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
