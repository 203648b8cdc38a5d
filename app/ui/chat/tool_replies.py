"""A chat reply that may call tools: the tool loop (app.core.chat.tool_loop) on a worker thread, each turn
saved as it ends (SavedTurns), the model's text shown as it streams, each call asked about in the approval
bar before it runs.

It stands where a StreamBridge stands for a plain reply (the reply controller's `stream`): `updated`,
`finished`, `stop()`, `drain()`. The loop's thread never touches a widget: text goes through a locked buffer
drained by a 40 ms timer, rows and approvals through queued signals.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.chat.operations import ChatOperations
from app.core.chat.tool_loop import Approval, PendingCall, ToolLoop, ToolRun
from app.core.chat.tool_turns import SavedTurns
from app.core.engines.base import ChatMessage, SamplingParams
from app.ui.chat.stream import FLUSH_MS, StreamResult

logger = logging.getLogger(__name__)


class ToolReply(QObject):
    """Signals (UI thread): `updated(msg_id, text)` as the model writes; `row_added(role, msg_id)` when a result
    or the model's next turn was saved; `approval(PendingCall)` when a call waits for the user;
    `finished(msg_id, StreamResult)` with the last turn's id."""

    updated = Signal(int, str)
    row_added = Signal(str, int)
    approval = Signal(object)
    finished = Signal(int, object)

    def __init__(
        self,
        make_loop: Callable[[Callable[[PendingCall], Approval]], ToolLoop],
        chats: ChatOperations,
        conv_id: int,
        reply_id: int,
        parent: QObject | None = None,
    ) -> None:
        """`make_loop(approve)`: the loop for this reply, asking `approve` about each call."""
        super().__init__(parent)
        self.msg_id, self.conv_id = reply_id, conv_id
        self.handle = None  # a StreamBridge's job handle: here the loop owns its jobs
        self.cancel = threading.Event()
        self.pending: PendingCall | None = None  # the call the approval bar shows
        self._answer: Approval | None = None
        self._answered = threading.Event()
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._shown = 0
        self._running: Future | None = None
        self._loop = make_loop(self._approve)
        self.turns = SavedTurns(chats, conv_id, reply_id, on_row=self._row, cancel=self.cancel)
        self._timer = QTimer(self)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self.drain)

    def start(self, pool: Executor, messages: list[ChatMessage], sampling: SamplingParams, servers: list[str]) -> None:
        """UI thread: the loop starts on `pool`."""
        self._timer.start()
        # The timer collects its end (drain): nothing crosses back to this thread from the pool.
        self._running = pool.submit(
            self._loop.run, messages, sampling, servers, cancel=self.cancel, on_text=self._on_text, sink=self.turns
        )

    # -- the loop's thread -----------------------------------------------------------------------
    def _on_text(self, text: str) -> None:
        """Host thread: a piece of the model's turn."""
        with self._lock:
            self._text.append(text)

    def _row(self, role: str, msg_id: int) -> None:
        """Loop thread: a row was committed; the model's next turn starts with no text."""
        if role == "assistant":
            with self._lock:
                self.msg_id, self._text, self._shown = msg_id, [], 0
        self.row_added.emit(role, msg_id)

    def _approve(self, call: PendingCall) -> Approval:
        """Loop thread: wait for the user's answer (a stop denies)."""
        self._answered.clear()
        self._answer = None
        self.approval.emit(call)
        while not self._answered.wait(0.1):
            if self.cancel.is_set():
                return "deny"
        return self._answer or "deny"

    # -- the UI thread ---------------------------------------------------------------------------
    def answer(self, approval: Approval) -> None:
        """The approval bar's button."""
        self._answer = approval
        self._answered.set()

    def stop(self) -> None:
        self.cancel.set()

    @property
    def active(self) -> bool:
        return self._running is None or not self._running.done()

    def drain(self) -> None:
        """Every FLUSH_MS: new text to the view; once the loop is over, its result."""
        with self._lock:
            grown = len(self._text) != self._shown
            text, msg_id = "".join(self._text), self.msg_id
            self._shown = len(self._text)
        if grown:
            self.updated.emit(msg_id, text)
        if self._running is not None and self._running.done():
            self._timer.stop()
            self.finished.emit(self.msg_id, self._result(self._running))

    def _result(self, running: Future) -> StreamResult:
        error = running.exception()
        if error is not None:
            logger.info("a reply with tools failed: %s", error)
            message = str(error)
            self.turns.chats.finish_reply(self.msg_id, "", "error", None, "error", message)
            return StreamResult("error", "", None, "error", message)
        run: ToolRun = running.result()
        final = run.final
        status = "stopped" if run.stopped else "done"
        reason = "cancelled" if run.stopped else (final.finish_reason if final is not None else "stop")
        extra = run.unused.as_stats() if run.unused is not None else None  # tools offered, none called
        return StreamResult(status, run.reply, final.stats if final is not None else None, reason, extra_stats=extra)

    def wait(self, timeout: float) -> None:
        """Shutdown: stop, then wait for the loop to end (its turns are saved as they end)."""
        self.cancel.set()
        if self._running is not None:
            try:
                self._running.result(timeout)
            except Exception:  # its failure was reported where it happened
                pass
