"""A plain reply as the host streams it: its text handed on piece by piece, written down as it grows, and its end
made into a `ReplyResult` and saved.

Everything here runs on the engine (host) thread, inside the job's sink, so it only appends and hands writes to
the chat writer thread (ChatOperations): a partial save never waits for an fsync on the engine's time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.chat.operations import ChatOperations
from app.core.engines.base import Chunk, GenerationStats
from app.core.runtime.jobs import ChunkEvent, HostEvent, JobDone, JobFailed

logger = logging.getLogger(__name__)

SAVE_EVERY_S = 1.0
SAVE_EVERY_TOKENS = 64
# Each partial save rewrites the whole reply and fsyncs: at thousands of tok/s, 64 tokens come every
# few ms, so saves are also kept this far apart (a crash still loses at most this much, never 1 s).
MIN_SAVE_GAP_S = 0.25


@dataclass
class ReplyResult:
    """How a reply ended, as it is saved and shown."""

    status: str  # "done" | "stopped" | "error"
    text: str
    stats: GenerationStats | None = None
    finish_reason: str | None = None
    error: str | None = None
    extra_stats: dict[str, Any] | None = None  # shown with the stats: a reply's unused tools (tool_loop)


@dataclass(frozen=True)
class ReplyRow:
    """Where a reply in a saved conversation is written: the writer, its conversation and its `streaming` row."""

    chats: ChatOperations
    conversation_id: int
    reply_id: int


class StreamedReply:
    """One plain reply: `sink` goes to `JobHost.submit`. `on_text(piece)` and `on_end(result)` run on the engine
    thread, the second once the end is handed to the writer. `row` None: nothing is saved (`hearth chat`)."""

    def __init__(
        self,
        on_text: Callable[[str], None] | None,
        on_end: Callable[[ReplyResult], None] | None,
        row: ReplyRow | None = None,
        *,
        save_every_s: float = SAVE_EVERY_S,
        save_every_tokens: int = SAVE_EVERY_TOKENS,
    ) -> None:
        self.on_text, self.on_end, self.row = on_text, on_end, row
        self.stop_requested = False  # a failure after a stop is the stop, not an error
        self.final: Chunk | None = None  # the last chunk: finish reason and stats
        self.failure: str | None = None  # the host's error, when the job failed
        self.result: ReplyResult | None = None
        self._parts: list[str] = []
        self._save_every_s = save_every_s
        self._save_every_tokens = save_every_tokens
        self._last_save = time.monotonic()
        self._unsaved = 0

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def stop(self) -> None:
        """Any thread: the job is being cancelled; its partial text is kept and marked stopped."""
        self.stop_requested = True

    def sink(self, event: HostEvent) -> None:
        """Engine thread: hand the text on, save now and then, and finish at the job's end."""
        if isinstance(event, ChunkEvent):
            self._chunk(event.chunk)
        elif isinstance(event, (JobDone, JobFailed)):
            self._end(event)

    def _chunk(self, chunk: Chunk) -> None:
        if chunk.text:
            self._parts.append(chunk.text)
            self._unsaved += 1
            if self.on_text is not None:
                self.on_text(chunk.text)
        if chunk.finish_reason is not None:
            self.final = chunk
        now = time.monotonic()
        since = now - self._last_save
        if (
            self.row is not None
            and self._unsaved
            and ((self._unsaved >= self._save_every_tokens and since >= MIN_SAVE_GAP_S) or since >= self._save_every_s)
        ):
            self._unsaved, self._last_save = 0, now
            self.row.chats.save_partial(self.row.reply_id, self.text)

    def _end(self, event: JobDone | JobFailed) -> None:
        text = self.text
        if isinstance(event, JobDone):
            self.final = getattr(event.result, "final", None) or self.final
            chunk = self.final
            reason = chunk.finish_reason if chunk is not None else "stop"
            stats = chunk.stats if chunk is not None else None
            if reason == "cancelled":
                result = ReplyResult("stopped", text, stats, reason)
            elif reason == "error":
                result = ReplyResult("error", text, stats, reason, getattr(chunk, "error", None))
            else:
                result = ReplyResult("done", text, stats, reason)
        else:
            self.failure = event.error_message
            if self.stop_requested:
                result = ReplyResult("stopped", text, None, "cancelled")
            else:
                result = ReplyResult("error", text, None, "error", event.error_message)
        self.result = result
        if self.row is not None:
            self.row.chats.finish_reply(
                self.row.reply_id, result.text, result.status, result.stats, result.finish_reason, result.error
            )
        if self.on_end is not None:
            self.on_end(result)
