"""What a download tells its caller while it runs: the phase it is in, and bytes with a rate, throttled."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

ProgressFn = Callable[[int, int, float], None]
PhaseFn = Callable[[str], None]
PROGRESS_INTERVAL_S = 0.2


class RateMeter:
    """Bytes per second over the last few seconds, so a stall shows as a falling rate, not a frozen one."""

    def __init__(self, window_s: float = 3.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, total_bytes: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._samples.append((now, total_bytes))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        t0, b0 = self._samples[0]
        return (total_bytes - b0) / (now - t0) if now > t0 else 0.0

    def reset(self) -> None:
        self._samples.clear()


class Reporting:
    """`progress(done, total, bytes_per_s)` at most every 0.2 s, and `on_phase(name)` ("verifying" while a file
    or a partial's prefix is hashed). Both are called on the thread that runs the download."""

    def __init__(self, progress: ProgressFn | None = None, on_phase: PhaseFn | None = None) -> None:
        self.progress, self.on_phase = progress, on_phase
        self._rate = RateMeter()
        self._last_emit = 0.0

    def phase(self, name: str) -> None:
        if self.on_phase:
            self.on_phase(name)

    def emit(self, position: int, total: int | None, force: bool = False) -> None:
        """Progress counts bytes received, including those not yet written."""
        now = time.monotonic()
        if not force and now - self._last_emit < PROGRESS_INTERVAL_S:
            return
        self._last_emit = now
        rate = self._rate.add(position, now)
        if self.progress:
            self.progress(position, total or 0, rate)
