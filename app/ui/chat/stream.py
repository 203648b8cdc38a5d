"""A chat turn shown on the UI thread, without flooding the event loop.

The turn (app.core.chat.turn) reports on the engine or the tool loop's thread; here that only appends to a
locked buffer (saved rows, text, the end), and a 40 ms QTimer on the UI thread drains it in that order, so the
view repaints at most ~25 times a second however fast the model is. No cross-thread signal per token. The turn
saves the reply itself.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.chat.reply_stream import ReplyResult
from app.core.chat.turn import ChatTurn
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import HostState

logger = logging.getLogger(__name__)

FLUSH_MS = 40
StreamResult = ReplyResult  # how a reply ended, as the thread shows it


class StreamBridge(QObject):
    """One reply in flight, shown: the TurnEvents of its `turn`. Signals (UI thread): `updated(msg_id, text so
    far)`; `row_added(role, msg_id)` when a reply with tools saved a tool's result or the model's next turn (whose
    text `updated` shows from then on); `finished(msg_id, StreamResult)` with the last turn's id."""

    updated = Signal(int, str)
    row_added = Signal(str, int)
    finished = Signal(int, object)

    def __init__(self, msg_id: int, conv_id: int, *, flush_ms: int = FLUSH_MS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.msg_id = msg_id  # the row the model is writing now
        self.conv_id = conv_id  # the conversation it streams into (a deleted one stops it)
        self.turn: ChatTurn | None = None  # set once it is started: what `stop` and `wait` reach
        self.text = ""
        self.flushes = 0  # view updates so far (tests check coalescing)
        self.chunks = 0
        self.result: StreamResult | None = None
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self._pending = 0  # pieces not yet shown
        self._rows: list[tuple[str, int]] = []  # rows saved, not yet shown
        self._final: StreamResult | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(flush_ms)
        self._timer.timeout.connect(self.drain)
        self._timer.start()

    @property
    def active(self) -> bool:
        return self.result is None

    # -- the turn's events (engine or loop thread) -----------------------------------------------
    def on_text(self, piece: str) -> None:
        """Engine thread: append and return."""
        with self._lock:
            self._parts.append(piece)
            self._pending += 1

    def on_row(self, role: str, msg_id: int) -> None:
        """Loop thread: a row was committed; the model's next turn starts with no text. Shown at the next drain
        (not by a queued signal of its own, which a busy UI thread could take after the drain that shows the end:
        the reply would end before its last row is in the thread)."""
        with self._lock:
            self._rows.append((role, msg_id))
            if role == "assistant":
                self.msg_id, self._parts, self._pending = msg_id, [], 0

    def on_finished(self, result: StreamResult) -> None:
        """Engine or loop thread: shown at the next drain, after the text before it."""
        with self._lock:
            self._final = result

    # -- the UI thread ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the turn to stop; its text so far is saved as stopped."""
        if self.turn is not None:
            self.turn.stop()

    def wait(self, timeout: float) -> None:
        """Shutdown: wait for the stopped turn to end (its last words are handed to the writer)."""
        if self.turn is not None:
            self.turn.wait(timeout)

    def drain(self) -> None:
        """Every flush_ms (and once more at shutdown)."""
        with self._lock:
            pending, final, msg_id, rows = self._pending, self._final, self.msg_id, self._rows
            self._rows = []
            if pending:
                self.text = "".join(self._parts)
                self.chunks += pending
                self._pending = 0
        for role, row_id in rows:  # in the order they were saved, before the text and the end that follow them
            self.row_added.emit(role, row_id)
        if pending and final is None:  # a finished reply is shown once, by `finished`, not laid out twice
            self.flushes += 1
            self.updated.emit(msg_id, self.text)
        if final is not None and self.result is None:
            self._timer.stop()
            self.result = final
            self.finished.emit(msg_id, final)


class HostWatcher(QObject):
    """Re-posts `JobHost.state_changed` (host thread) to the UI thread as `changed(HostState)`."""

    changed = Signal(object)

    def __init__(self, host: JobHost, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._alive = True
        self._unsubscribe = host.state_changed.connect(self._on_state)
        self.destroyed.connect(self.detach)

    def _on_state(self, state: HostState) -> None:
        """Host thread."""
        with self._lock:
            if self._alive:
                self.changed.emit(state)

    def detach(self, *_: object) -> None:
        with self._lock:
            if self._alive:
                self._alive = False
                self._unsubscribe()
