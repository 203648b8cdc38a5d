"""A chat reply that uses tools, written down as it goes: the model's turn into its reply row (its text and
the calls it made), each result as a tool row under it, the model's next turn as a new reply row under that.
Each row is committed on the chat writer thread before the model reads what it holds, so a crash loses at
most the turn being written (as any reply)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from app.core.chat.operations import ChatOperations
from app.core.chat.tool_loop import PendingCall, ToolStep, UnusedTools
from app.core.engines.base import Chunk

logger = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 30.0


class SavedTurns:
    """A TurnSink (tool_loop) for one reply in a saved conversation. `on_row(role, msg_id)` (loop thread) says
    when a row was added: a tool's result, or the model's next turn (the one streaming from then on)."""

    def __init__(
        self,
        chats: ChatOperations,
        conv_id: int,
        reply_id: int,
        on_row: Callable[[str, int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        """`cancel`: the loop's; a turn that ends once it is set is saved as stopped."""
        self.chats, self.conv_id, self.cancel = chats, conv_id, cancel
        self.reply_id = reply_id  # the row the model is writing now
        self._parent = reply_id  # where the next row goes
        self.on_row = on_row

    def turn_ended(
        self, content: str, calls: list[PendingCall], final: Chunk | None, unused: UnusedTools | None = None
    ) -> None:
        stats: dict[str, Any] | None = asdict(final.stats) if final is not None and final.stats is not None else None
        if unused is not None:  # saved with the stats, so the note is there when the chat is opened again
            stats = {**(stats or {}), **unused.as_stats()}
        reason = "tool_calls" if calls else (final.finish_reason if final is not None else None)
        stored = [{"id": c.id, "server": c.server, "tool": c.tool, "arguments": c.arguments} for c in calls]
        status = "stopped" if self.cancel is not None and self.cancel.is_set() else "done"
        self.chats.finish_reply(self.reply_id, content, status, stats, reason, None, stored).result(WRITE_TIMEOUT_S)

    def step_done(self, step: ToolStep) -> None:
        error = step.error or (step.result.text[:500] if step.result is not None and step.result.is_error else None)
        writing = self.chats.add_tool_result(self.conv_id, self._parent, step.call.id, step.for_model(), error)
        self._parent = writing.result(WRITE_TIMEOUT_S)
        if self.on_row is not None:
            self.on_row("tool", self._parent)

    def next_turn(self) -> None:
        self.reply_id = self._parent = self.chats.begin_reply(self.conv_id, self._parent).result(WRITE_TIMEOUT_S)
        if self.on_row is not None:
            self.on_row("assistant", self.reply_id)
