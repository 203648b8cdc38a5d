"""How many threads an engine step takes, as the machine's other work leaves the cores.

llama.cpp's CPU threads meet at a barrier after every operation of a graph: hundreds of times a token. On a
quiet machine they all run, and a barrier costs microseconds. When a browser or a compile takes a core, the
OS gives that core to the other program, and the engine's other threads spin at the barrier until the missing
thread runs again. That wait lasts a scheduler slice. Measured on 2 cores (bench/busy.py), SmolLM2 on two
fixed threads decoded 28 tok/s beside one busy process and 21 beside two. Following the cores left, it
decoded 49 and 38; quiet, it decoded 75 either way (docs/speed-model.md has the table).

So each step takes as many threads as the cores left to it: the machine's idle cores plus the CPU this
process got, over the last window. That second part is what the threads themselves got, so the count settles.
Two threads beside a busy process get about 1.3 cores between them, and the count drops to one. One thread on a
machine gone quiet sees a core idle beside it, and the count goes back up.

No fixed OpenMP wait policy does this: passive waiting is fair under load but decoded 49 tok/s quiet, where
libgomp's default spin decoded 81. So the wait policy is left as it is, and the thread count is what adapts.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# How often the cores are looked at. Reading the counters costs tens of microseconds, and a browser's burst
# lasts longer than this.
WINDOW_S = 0.5
# A thread is added when the cores left exceed the threads by this much, and dropped when they fall short by
# this much. The two gaps differ so that a share between the thresholds does not flap.
ADD_AT = 0.7
DROP_AT = 0.4


@dataclass(frozen=True)
class CpuSample:
    """Counters at one moment: a monotonic clock and cumulative CPU seconds."""

    wall: float
    idle: float  # idle time of the whole machine, summed over its logical CPUs
    own: float  # CPU time of this process, all its threads


@functools.cache
def _this_process() -> Any:
    import psutil

    return psutil.Process()


def sample_cpu() -> CpuSample:
    import psutil

    times = _this_process().cpu_times()
    return CpuSample(time.monotonic(), float(psutil.cpu_times().idle), float(times.user + times.system))


class CpuShare:
    """The thread count for one engine's steps, from 1 to `most` (the load's threads). Owned by the engine
    host's thread, like the BatchRunner that asks it every step."""

    def __init__(
        self,
        most: int,
        sample: Callable[[], CpuSample] = sample_cpu,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock`: the sample's own, read every step (the counters only once a window)."""
        self.most = max(1, most)
        self.threads = self.most
        self.free = float(self.most)  # cores left to this process in the last window (logs, tests)
        self._sample = sample
        self._window_s = window_s
        self._clock = clock
        self._last: CpuSample | None = None

    def threads_now(self) -> int:
        """The threads for the next step. The count is looked at again once a window has passed since the
        last look, and moves by one thread at most."""
        if self.most == 1:
            return 1
        if self._last is not None and self._clock() - self._last.wall < self._window_s:
            return self.threads
        try:
            now = self._sample()
        except Exception:  # psutil missing, or the counters unreadable: the count stays where it is
            logger.debug("CPU counters unreadable; staying at %d threads", self.threads, exc_info=True)
            return self.threads
        last, self._last = self._last, now
        if last is None or now.wall <= last.wall:
            return self.threads
        span = now.wall - last.wall
        self.free = max(0.0, (now.idle - last.idle) / span) + max(0.0, (now.own - last.own) / span)
        before = self.threads
        if self.free >= self.threads + ADD_AT and self.threads < self.most:
            self.threads += 1
        elif self.free < self.threads - DROP_AT and self.threads > 1:
            self.threads -= 1
        if self.threads != before:
            logger.info("running on %d of %d threads (%.1f cores left to it)", self.threads, self.most, self.free)
        return self.threads
