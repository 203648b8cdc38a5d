"""Asking the user about a tool call from the loop's thread: the question goes to whoever shows it, and the loop
waits for the answer, which may come from any thread (a window's button, a terminal)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.core.chat.tool_loop import Approval, PendingCall

POLL_S = 0.1  # how soon a stopped turn notices while a call waits for its answer


class WaitedApproval:
    """An `approve` for ToolLoop: `ask(call)` runs on the loop's thread and must only hand the question on; the
    loop then waits for `answer`. A stopped turn (`cancel` set) denies the call it was waiting on."""

    def __init__(self, ask: Callable[[PendingCall], None], cancel: threading.Event) -> None:
        self.ask, self.cancel = ask, cancel
        self._answer: Approval | None = None
        self._answered = threading.Event()

    def __call__(self, call: PendingCall) -> Approval:
        """Loop thread: ask, then wait for the answer (a stop denies)."""
        self._answered.clear()
        self._answer = None
        self.ask(call)
        while not self._answered.wait(POLL_S):
            if self.cancel.is_set():
                return "deny"
        return self._answer or "deny"

    def answer(self, approval: Approval) -> None:
        """Any thread: the user's answer to the call being asked about."""
        self._answer = approval
        self._answered.set()
