"""Fault injection for the fake Hub's resolve endpoint: one queued fault per matching request, in order."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from tests.fakehub.repos import Source

DROP = "drop"
RESET = "reset"
STALL = "stall"
THROTTLE = "throttle"
FLIP = "flip"
IGNORE_RANGE = "ignore_range"
STATUS = "status"
CHANGE_ETAG = "change_etag"
DELAY = "delay"


@dataclass
class Fault:
    """One misbehaviour. Build with the classmethods; `after` counts body bytes of this response."""

    kind: str
    after: int = 0
    seconds: float | None = None
    rate: int = 0
    offset: int = 0
    status: int = 0
    retry_after: float | None = None
    new_content: Source | None = None
    released: threading.Event = field(default_factory=threading.Event)
    triggered: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def drop(cls, after: int) -> Fault:
        """Send `after` body bytes, then close the connection cleanly (FIN)."""
        return cls(DROP, after=after)

    @classmethod
    def reset(cls, after: int) -> Fault:
        """Send `after` body bytes, then abort with a TCP RST (SO_LINGER 0)."""
        return cls(RESET, after=after)

    @classmethod
    def stall(cls, after: int, seconds: float | None = None) -> Fault:
        """Send `after` bytes, then pause for `seconds` or until `release()` (forever if neither), then finish."""
        return cls(STALL, after=after, seconds=seconds)

    @classmethod
    def throttle(cls, bytes_per_s: int) -> Fault:
        return cls(THROTTLE, rate=bytes_per_s)

    @classmethod
    def flip(cls, offset: int) -> Fault:
        """Serve the body with the byte at file offset `offset` inverted; headers stay those of the true file."""
        return cls(FLIP, offset=offset)

    @classmethod
    def ignore_range(cls) -> Fault:
        """Answer a Range request with 200 and the whole body."""
        return cls(IGNORE_RANGE)

    @classmethod
    def status_code(cls, status: int, retry_after: float | None = None) -> Fault:
        """Answer `status` (e.g. 503 or 429) with an optional `Retry-After` header, no body from the file."""
        return cls(STATUS, status=status, retry_after=retry_after)

    @classmethod
    def change_etag(cls, new_content: Source | None = None) -> Fault:
        """Publish a new version of the file (a new commit, see `FakeRepo.bump`) before answering."""
        return cls(CHANGE_ETAG, new_content=new_content)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait before sending the response headers."""
        return cls(DELAY, seconds=seconds)

    def release(self) -> None:
        """End a stall now."""
        self.released.set()

    def wait_stall(self) -> None:
        self.released.wait(self.seconds)


class FaultQueue:
    """Faults keyed by (repo_id or None, file path, HTTP method); each request consumes the first that matches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str | None, str, str], deque[Fault]] = {}
        self._all: list[Fault] = []

    def add(self, path: str, *faults: Fault, repo_id: str | None = None, method: str = "GET") -> Fault:
        """Queue faults for `path` (a file path in the repo); returns the last one (handy for `release()`)."""
        with self._lock:
            queue = self._queues.setdefault((repo_id, path, method.upper()), deque())
            queue.extend(faults)
            self._all.extend(faults)
        return faults[-1]

    def take(self, repo_id: str, path: str, method: str) -> Fault | None:
        with self._lock:
            for key in ((repo_id, path, method), (None, path, method)):
                queue = self._queues.get(key)
                if queue:
                    fault = queue.popleft()
                    fault.triggered.set()
                    return fault
        return None

    def pending(self, path: str | None = None) -> int:
        with self._lock:
            return sum(len(q) for (_, p, _), q in self._queues.items() if path is None or p == path)

    def clear(self) -> None:
        with self._lock:
            self._queues.clear()

    def release_all(self) -> None:
        """Unblock every stall; called on close so no server thread hangs."""
        with self._lock:
            for fault in self._all:
                fault.release()
