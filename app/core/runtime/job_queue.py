"""The engine host's one bounded FIFO of jobs, shared by the chat and the API.

Any thread puts; only the host thread takes. A job cancelled while it waits keeps its place in the
deque (the host skips it) but no longer counts against the bound, so a client that gives up frees its
slot at once. A full queue says how long to wait, from a moving average of how long jobs take.
Several jobs may run at once (a batched engine's sequences): the queue holds only those beyond them.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable

from app.core.runtime.jobs import HostBusy, HostClosed, JobHandle

# How long a job usually takes, before any has run: what a full queue tells a client to wait.
FIRST_JOB_ESTIMATE_S = 2.0
MAX_RETRY_AFTER_S = 60


class JobQueue:
    def __init__(self, size: int) -> None:
        self.size = size  # any thread may change it (Settings → Server); checked at each put
        self._jobs: collections.deque[JobHandle] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._running: set[JobHandle] = set()
        self._job_s = FIRST_JOB_ESTIMATE_S

    def waiting(self) -> int:
        """Jobs waiting (not counting the one running, nor those cancelled while they waited)."""
        with self._cond:
            return self._live()

    def put(self, handle: JobHandle) -> None:
        """Any thread. Raises HostClosed after close(), HostBusy (with the seconds to wait) when full."""
        with self._cond:
            if self._closed:
                raise HostClosed("the engine has shut down")
            waiting = self._live()
            if waiting >= self.size:
                retry = min(MAX_RETRY_AFTER_S, max(1, math.ceil(self._job_s)))
                raise HostBusy(f"the engine is busy ({waiting} jobs waiting); try again in {retry} s", retry)
            self._jobs.append(handle)
            self._cond.notify()

    def close(self, marker: JobHandle, *, cancel: bool = True) -> None:
        """Any thread: cancel the running job and every waiting one (unless not `cancel`: then they run
        to their end first), then queue `marker` (the host's shutdown job) last. Later puts raise
        HostClosed; a second close does nothing."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for handle in (*self._jobs, *self._running) if cancel else ():
                handle.cancel()
            self._jobs.append(marker)
            self._cond.notify()

    def take(self, idle_timeout: Callable[[], float | None]) -> JobHandle | None:
        """Host thread: the next job, now the current one; None when `idle_timeout()` seconds passed
        with nothing queued (None from it: wait for ever)."""
        with self._cond:
            while not self._jobs:
                timeout = idle_timeout()
                if not self._cond.wait(timeout) and timeout is not None and not self._jobs:
                    return None
            handle = self._jobs.popleft()
            self._running.add(handle)
            return handle

    def take_if(self, accept: Callable[[JobHandle], bool]) -> JobHandle | None:
        """Host thread, without waiting: the first job if `accept` takes it (or it was cancelled while it
        waited), now running beside the others; None otherwise. Only the first: FIFO, nothing jumps it."""
        with self._cond:
            if not self._jobs:
                return None
            handle = self._jobs[0]
            if not handle.cancelled and not accept(handle):
                return None
            self._jobs.popleft()
            self._running.add(handle)
            return handle

    def ended(self, handle: JobHandle) -> None:
        """Host thread: that running job is over."""
        with self._cond:
            self._running.discard(handle)

    def took(self, seconds: float) -> None:
        """Host thread: how long the last job ran, for the wait a full queue announces."""
        self._job_s = 0.8 * self._job_s + 0.2 * seconds

    def drain(self) -> list[JobHandle]:
        """Host thread, after the shutdown marker: whatever is left, removed."""
        with self._cond:
            left = list(self._jobs)
            self._jobs.clear()
        return left

    def busy(self) -> bool:
        """Any thread: a job runs or waits."""
        with self._cond:
            return bool(self._running) or self._live() > 0

    def _live(self) -> int:
        return sum(1 for h in self._jobs if not h.cancelled)
