"""A chat reply that may call tools, shown: the turn (app.core.chat.turn) runs the tool loop on the chat tools'
worker thread and saves each of its turns as it ends; here its text and rows are shown as for any reply
(StreamBridge), and each call is asked about in the approval bar before it runs.

The loop's thread never touches a widget: the question goes out as a queued signal, and the loop waits for the
bar's answer (WaitedApproval), which a stop turns into a denial.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.core.chat.approvals import WaitedApproval
from app.core.chat.tool_loop import Approval, PendingCall, ToolLoop
from app.ui.chat.stream import StreamBridge

logger = logging.getLogger(__name__)


class ToolReply(StreamBridge):
    """A StreamBridge whose turn calls tools. `approval(PendingCall)` (UI thread) when a call waits for the user;
    `answer` gives the user's choice. `loop` and `cancel` go to the turn (ChatTurns.reply)."""

    approval = Signal(object)

    def __init__(
        self,
        make_loop: Callable[[Callable[[PendingCall], Approval]], ToolLoop],
        conv_id: int,
        reply_id: int,
        parent: QObject | None = None,
    ) -> None:
        """`make_loop(approve)`: the loop for this reply, asking `approve` about each call (on the loop's thread)."""
        super().__init__(reply_id, conv_id, parent=parent)
        self.cancel = threading.Event()  # the turn's stop: a call waiting for its answer is denied
        self.approvals = WaitedApproval(self.approval.emit, self.cancel)
        self.loop = make_loop(self.approvals)

    def answer(self, approval: Approval) -> None:
        """UI thread: the approval bar's button."""
        self.approvals.answer(approval)
