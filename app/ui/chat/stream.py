"""From host sink events to the chat view, without flooding the event loop.

The sink (host thread) only appends to a locked buffer and hands partial-reply saves to the chat
writer thread (ChatOperations); a 40 ms QTimer on the UI thread drains the buffer, so the view
repaints at most ~25 times a second however fast the model is. No cross-thread signal per token.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.chat.operations import ChatOperations
from app.core.engines.base import Chunk, GenerationStats
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import ChunkEvent, HostEvent, HostState, JobDone, JobFailed, JobHandle

logger = logging.getLogger(__name__)

FLUSH_MS = 40
SAVE_EVERY_S = 1.0
SAVE_EVERY_TOKENS = 64
# Each partial save rewrites the whole reply and fsyncs: at thousands of tok/s, 64 tokens come every
# few ms, so saves are also kept this far apart (a crash still loses at most this much, never 1 s).
MIN_SAVE_GAP_S = 0.25


@dataclass
class StreamResult:
    status: str  # "done" | "stopped" | "error"
    text: str
    stats: GenerationStats | None = None
    finish_reason: str | None = None
    error: str | None = None
    extra_stats: dict[str, Any] | None = None  # shown with the stats: a reply's unused tools (tool_loop)


class _Buffer:
    """Filled on the host thread, drained on the UI thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parts: list[str] = []
        self.pending = 0  # chunks not yet shown
        self.final: HostEvent | None = None
        self.final_chunk: Chunk | None = None


class StreamBridge(QObject):
    """One reply in flight: `sink` goes to `JobHost.submit`; `updated` / `finished` on the UI thread."""

    updated = Signal(int, str)  # message id, the whole text so far
    finished = Signal(int, object)  # message id, StreamResult

    def __init__(
        self,
        msg_id: int,
        conv_id: int,
        chats: ChatOperations,
        *,
        flush_ms: int = FLUSH_MS,
        save_every_s: float = SAVE_EVERY_S,
        save_every_tokens: int = SAVE_EVERY_TOKENS,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.msg_id = msg_id
        self.conv_id = conv_id
        self.handle: JobHandle | None = None
        self.text = ""
        self.flushes = 0  # view updates so far (tests check coalescing)
        self.chunks = 0
        self.result: StreamResult | None = None
        self.stop_requested = False
        self._chats = chats
        self._buf = _Buffer()
        self._save_every_s = save_every_s
        self._save_every_tokens = save_every_tokens
        self._last_save = time.monotonic()
        self._unsaved = 0
        self._timer = QTimer(self)
        self._timer.setInterval(flush_ms)
        self._timer.timeout.connect(self.drain)
        self._timer.start()

    @property
    def active(self) -> bool:
        return self.result is None

    def sink(self, event: HostEvent) -> None:
        """Host thread: append and return; the partial save goes to the writer thread."""
        buf = self._buf
        save: str | None = None
        with buf.lock:
            if isinstance(event, ChunkEvent):
                chunk = event.chunk
                if chunk.text:
                    buf.parts.append(chunk.text)
                    buf.pending += 1
                    self._unsaved += 1
                if chunk.finish_reason is not None:
                    buf.final_chunk = chunk
                now = time.monotonic()
                since = now - self._last_save
                if self._unsaved and (
                    (self._unsaved >= self._save_every_tokens and since >= MIN_SAVE_GAP_S)
                    or since >= self._save_every_s
                ):
                    save = "".join(buf.parts)
                    self._unsaved, self._last_save = 0, now
            elif isinstance(event, (JobDone, JobFailed)):
                buf.final = event
        if save is not None:
            self._chats.save_partial(self.msg_id, save)

    def stop(self) -> None:
        """UI thread: ask the host to stop; the partial text is kept and marked stopped."""
        self.stop_requested = True
        if self.handle is not None:
            self.handle.cancel()

    def drain(self) -> None:
        """UI thread, every flush_ms (and once more at shutdown)."""
        buf = self._buf
        with buf.lock:
            pending, final = buf.pending, buf.final
            if pending:
                self.text = "".join(buf.parts)
                self.chunks += pending
                buf.pending = 0
            final_chunk = buf.final_chunk
        if pending and final is None:  # a finished reply is shown once, by `finished`, not laid out twice
            self.flushes += 1
            self.updated.emit(self.msg_id, self.text)
        if final is not None:
            self._timer.stop()
            self._finish(final, final_chunk)

    def _finish(self, event: HostEvent, final_chunk: Chunk | None) -> None:
        if isinstance(event, JobDone):
            res = event.result
            chunk = getattr(res, "final", None) or final_chunk
            reason = chunk.finish_reason if chunk is not None else "stop"
            stats = chunk.stats if chunk is not None else None
            if reason == "cancelled":
                result = StreamResult("stopped", self.text, stats, reason)
            elif reason == "error":
                result = StreamResult("error", self.text, stats, reason, getattr(chunk, "error", None))
            else:
                result = StreamResult("done", self.text, stats, reason)
        else:
            message = event.error_message if isinstance(event, JobFailed) else "unknown failure"
            if self.stop_requested:
                result = StreamResult("stopped", self.text, None, "cancelled")
            else:
                result = StreamResult("error", self.text, None, "error", message)
        self.result = result
        self._chats.finish_reply(
            self.msg_id, result.text, result.status, result.stats, result.finish_reason, result.error
        )
        self.finished.emit(self.msg_id, result)


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
