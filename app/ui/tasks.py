"""Run blocking work off the UI thread and get the answer back on it (after Anki's QueryOp)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal, Slot

logger = logging.getLogger(__name__)


class TaskRunner(QObject):
    """`run(op, on_success, on_error)`: `op` runs on the pool and never touches widgets;
    `watch(future, …)`: the same for work that already runs elsewhere (the chat writer thread).
    The callbacks run on the thread that owns this object (the Qt main thread)."""

    _finished = Signal(object, object, object)  # callback, value, future

    def __init__(self, pool: Executor | None = None, parent: QObject | None = None) -> None:
        """`pool` None: a runner that only watches futures."""
        super().__init__(parent)
        self._pool = pool
        self._pending: set[Future] = set()
        self._owners: dict[Future, QObject] = {}
        self._closed = False
        # Always queued: an op that is done before run() returns (its done-callback then fires on this
        # thread) must still answer later, from the event loop, never inside run().
        self._finished.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def close(self) -> None:
        """Deliver nothing more: the widgets that asked may be gone (shutdown)."""
        self._closed = True

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def run(
        self,
        op: Callable[[], Any],
        on_success: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        owner: QObject | None = None,
    ) -> Future:
        """`owner`: the widget the callbacks belong to; if it is deleted first, they are skipped."""
        if self._pool is None:
            raise RuntimeError("this TaskRunner has no pool; it only watches futures")
        try:
            future = self._pool.submit(op)
        except RuntimeError:
            # The pool is shut down (Hearth is quitting): a late event's work is dropped, not a crash.
            logger.debug("not running %r: the pool is shut down", op)
            dropped: Future = Future()
            dropped.cancel()
            return dropped
        return self.watch(future, on_success, on_error, owner)

    def watch(
        self,
        future: Future,
        on_success: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        owner: QObject | None = None,
    ) -> Future:
        """Answer on this object's thread once `future` is done, wherever it runs; as `run`."""
        self._pending.add(future)
        if owner is not None:
            self._owners[future] = owner

        def done(fut: Future) -> None:
            # Called on the thread that finished the future: only emit, the queued signal crosses threads.
            exc = fut.exception()
            if exc is not None:
                self._finished.emit(on_error or _log_error, exc, fut)
            else:
                self._finished.emit(on_success, fut.result(), fut)

        future.add_done_callback(done)
        return future

    @Slot(object, object, object)
    def _deliver(self, callback: Callable[[Any], None] | None, value: Any, future: Future) -> None:
        """Runs on the main thread."""
        self._pending.discard(future)
        owner = self._owners.pop(future, None)
        if self._closed or (owner is not None and not shiboken6.isValid(owner)):
            return
        if callback is not None:
            callback(value)


def _log_error(exc: BaseException) -> None:
    logger.error("background task failed", exc_info=exc)
