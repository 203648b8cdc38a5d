"""Core events → Qt signals: re-emit a core `Event` on the main thread, optionally coalesced per key."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot

from app.core.events import Event

logger = logging.getLogger(__name__)


class EventBridge(QObject):
    """`fired(value)` runs on the thread that owns this object (the main thread) for every core emit.

    With `coalesce_key`, values are kept per key and only the latest is delivered, at most `max_rate_hz`
    times a second per key: a fast download cannot flood the event loop with progress.
    """

    fired = Signal(object)
    _posted = Signal(object)
    _wake = Signal()

    def __init__(
        self,
        event: Event,
        parent: QObject | None = None,
        *,
        coalesce_key: Callable[[Any], Hashable] | None = None,
        max_rate_hz: float = 10.0,
    ) -> None:
        super().__init__(parent)
        self._key = coalesce_key
        self._interval = 1.0 / max_rate_hz
        self._lock = threading.Lock()
        self._pending: dict[Hashable, Any] = {}
        self._last_flush = 0.0
        self._closed = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._flush)
        # Explicitly queued: the emitting thread is a worker, delivery must happen on ours.
        self._posted.connect(self._deliver, Qt.ConnectionType.QueuedConnection)
        self._wake.connect(self._on_wake, Qt.ConnectionType.QueuedConnection)
        self._unsubscribe = unsubscribe = event.connect(self._on_event)
        # Stop listening as soon as this (or the widget owning it) is deleted, not at the next emit. A lambda:
        # PySide never calls a slot bound to the object being destroyed.
        self.destroyed.connect(lambda *_: unsubscribe())

    def close(self) -> None:
        """Main thread: stop listening, and drop what is already queued: at quit the service it came
        from may be closed before the event loop gets to it."""
        self._closed = True
        self._unsubscribe()
        self._timer.stop()
        with self._lock:
            self._pending.clear()

    def _on_event(self, value: Any) -> None:
        """Any thread: hand the value over; never touch widgets here."""
        if not shiboken6.isValid(self):  # the widget that owned us is gone: stop listening
            self._unsubscribe()
            return
        if self._key is None:
            self._posted.emit(value)
            return
        key = self._key(value)
        with self._lock:
            first = not self._pending
            self._pending[key] = value
        if first:
            self._wake.emit()

    @Slot(object)
    def _deliver(self, value: Any) -> None:
        if not self._closed:
            self.fired.emit(value)

    @Slot()
    def _on_wake(self) -> None:
        if self._closed or self._timer.isActive():
            return
        wait = self._interval - (time.monotonic() - self._last_flush)
        if wait <= 0:
            self._flush()
        else:
            self._timer.start(int(wait * 1000) + 1)

    @Slot()
    def _flush(self) -> None:
        with self._lock:
            values = list(self._pending.values())
            self._pending.clear()
        self._last_flush = time.monotonic()
        for value in values:
            self.fired.emit(value)
