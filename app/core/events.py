"""A tiny observer: models emit, views connect. Qt-free, so core stays testable headless."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Event(Generic[T]):
    """Callbacks run on whichever thread calls `emit`; a Qt view re-posts to its own thread."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[T], None]] = []

    def connect(self, callback: Callable[[T], None]) -> Callable[[], None]:
        """Subscribe; returns a function that unsubscribes."""
        with self._lock:
            self._callbacks.append(callback)
        return lambda: self.disconnect(callback)

    def disconnect(self, callback: Callable[[T], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def emit(self, value: T) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(value)
            except Exception:  # one broken listener must not silence the others
                logger.exception("listener of %s failed", self.name or "event")
