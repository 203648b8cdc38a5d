"""Ends a blocked read from another thread: on cancel, pause, or when no byte arrived for the stall timeout."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)
_TICK_S = 0.05


class Watchdog:
    """A daemon thread per download. `touch()` on every chunk; `arm()`/`disarm()` around each request.

    It shuts the socket down rather than closing it: on Linux only `shutdown` wakes a `recv` blocked in
    another thread, which then sees end-of-stream and returns.
    """

    def __init__(self, stall_timeout_s: float, should_stop: Callable[[], bool], name: str = "download") -> None:
        self.stall_timeout_s = stall_timeout_s
        self._should_stop = should_stop
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._armed = False
        self._closed = threading.Event()
        self.last_data = time.monotonic()
        self.reason: str | None = None  # "stop" or "stall" once it fired for the current request
        self._thread = threading.Thread(target=self._run, name=f"watchdog:{name}", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        with self._lock:
            self.reason = None
            self._sock = None
            self.last_data = time.monotonic()
            self._armed = True

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
            self._sock = None

    def touch(self) -> None:
        self.last_data = time.monotonic()

    def attach(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sock = sock
            fire = self._armed and self.reason is not None
        if fire:
            self._shutdown()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=1)

    def _run(self) -> None:
        while not self._closed.wait(_TICK_S):
            with self._lock:
                if not self._armed or self.reason is not None:
                    continue
                if self._should_stop():
                    self.reason = "stop"
                elif time.monotonic() - self.last_data > self.stall_timeout_s:
                    self.reason = "stall"
                else:
                    continue
            logger.debug("watchdog: ending the request (%s)", self.reason)
            self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its owner
