"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    """Poll `predicate` until true or timeout; for tests that watch state set on another thread."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
