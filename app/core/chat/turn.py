"""One reply of a chat turn, Qt-free: its request run on the engine host (plain, or through the tool loop when the
turn may call tools), shown through events as it streams, and written down as it goes and when it ends.

The window and `hearth chat` both run it; a window only marshals the events to its own thread. Planning the
request (the context fit) and saving the user's message come before it (sending.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.chat.reply_stream import ReplyResult, ReplyRow, StreamedReply
from app.core.chat.tool_loop import ToolLoop, ToolRun
from app.core.chat.tool_turns import SavedTurns
from app.core.engines.base import Chunk, GenerateRequest
from app.core.errors import HearthError
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import GenerateJob, HostBusy, HostClosed, JobHandle

logger = logging.getLogger(__name__)


class TurnEvents(Protocol):
    """What a turn reports as it goes. Each runs on the thread it names and the turn waits for it: hand the news
    to your own thread (a window's timer or queued signal) and return."""

    def on_text(self, piece: str) -> None:
        """Engine (host) thread: a piece of the model's text, as it streams."""

    def on_row(self, role: str, msg_id: int) -> None:
        """Tool-loop thread: a row was committed: a tool's result ("tool"), or the model's next turn
        ("assistant"), which streams from then on. Only a turn with tools and a saved reply has rows."""

    def on_finished(self, result: ReplyResult) -> None:
        """The thread the turn ended on (the engine's for a plain reply, the loop's for one with tools), once its
        end is handed to the writer. Not called for a turn the host refused (`start` says why)."""


@dataclass(frozen=True)
class TurnTools:
    """The tools a turn may call: `loop` (its `approve` runs on the loop's thread) over these MCP `servers`, run on
    `pool` so that the caller's thread stays free to show the turn or stop it."""

    loop: ToolLoop
    servers: Sequence[str]
    pool: Executor
    choice: str | dict[str, Any] = "auto"


# What a turn does to its request before the model reads it (the documents' passages put before the question,
# retrieval.py): it runs on the turn's worker thread, never the caller's, and may read `cancel`.
Prepare = Callable[[GenerateRequest, threading.Event], GenerateRequest]


class ChatTurn:
    """One reply: `start()`, then `stop()` or `wait()`; `result` once it has ended.

    `host`: where a plain reply runs (a reply with `tools` runs on its loop's host). `row`: the reply's row in a
    saved conversation, written as the reply streams and when it ends (a reply with tools writes each of its
    turns, each tool's result and the next turn under it, SavedTurns); None keeps nothing (the caller does).
    `events` None: nothing is reported as it goes (the caller waits). `cancel`: the turn's stop, when something
    else must see it too (a WaitedApproval waiting on the loop's thread). `prepare`: changes the request first,
    on `pool` (a plain reply) or the loop's thread (a reply with tools); a failure there ends the turn as an
    error, reported like any other end."""

    def __init__(
        self,
        host: JobHost | None,
        request: GenerateRequest,
        events: TurnEvents | None = None,
        *,
        row: ReplyRow | None = None,
        tools: TurnTools | None = None,
        cancel: threading.Event | None = None,
        source: str = "chat",
        prepare: Prepare | None = None,
        pool: Executor | None = None,
    ) -> None:
        if host is None and tools is None:
            raise ValueError("a plain reply needs a host")
        if prepare is not None and tools is None and pool is None:
            raise ValueError("a plain reply that prepares its request needs a pool to do it on")
        self.prepare, self.pool = prepare, pool
        self.host, self.request, self.events, self.row, self.tools = host, request, events, row, tools
        self.source = source
        self.cancel = cancel or threading.Event()
        self.handle: JobHandle | None = None  # a plain reply's job
        self.stream: StreamedReply | None = None  # a plain reply's text, saves and end
        self.run: ToolRun | None = None  # a reply with tools: the whole exchange, once it has ended
        self.result: ReplyResult | None = None
        self.failure: BaseException | None = None  # why there is no reply: the host refused or failed, the loop raised
        self._done = threading.Event()

    @property
    def final(self) -> Chunk | None:
        """The model's last chunk (its finish reason and stats), once the turn has ended."""
        if self.stream is not None:
            return self.stream.final
        return self.run.final if self.run is not None else None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def start(self) -> str | None:
        """Caller's thread: submit the reply. Returns why the host refused it (its row is then saved as that
        error and no event follows), or None."""
        if self.tools is not None:
            self.tools.pool.submit(self._run_tools)
            return None
        if self.prepare is not None:
            assert self.pool is not None
            self.pool.submit(self._prepare_then_submit)
            return None
        return self._submit()

    def _submit(self) -> str | None:
        """Caller's or worker thread: the plain reply's job on the host; why the host refused it, or None."""
        assert self.host is not None
        on_text = self.events.on_text if self.events is not None else None
        self.stream = StreamedReply(on_text, self._ended, self.row)
        try:
            self.handle = self.host.submit(GenerateJob(request=self.request, source=self.source), self.stream.sink)
        except (HostBusy, HostClosed) as exc:
            self.failure = exc
            self.result = ReplyResult("error", "", None, "error", str(exc))
            if self.row is not None:
                self.row.chats.finish_reply(self.row.reply_id, "", "error", None, "error", str(exc))
            self._done.set()
            return str(exc)
        if self.cancel.is_set():  # stopped while the job was being submitted from a worker
            self.stop()
        return None

    def _prepared(self) -> bool:
        """Worker or loop thread: run `prepare`; False when the turn ended instead (it failed, or was stopped),
        its row saved and its end reported."""
        if self.prepare is None:
            return True
        try:
            self.request = self.prepare(self.request, self.cancel)
        except Exception as exc:
            logger.info("preparing a reply failed: %s", exc)
            self.failure = exc
            self._end_early(ReplyResult("error", "", None, "error", str(exc)))
            return False
        if self.cancel.is_set():
            self._end_early(ReplyResult("stopped", "", None, "cancelled", None))
            return False
        return True

    def _end_early(self, result: ReplyResult) -> None:
        if self.row is not None:
            self.row.chats.finish_reply(
                self.row.reply_id, result.text, result.status, None, result.finish_reason, result.error
            )
        self._finish(result)

    def _prepare_then_submit(self) -> None:
        """Worker thread: the request prepared, then the reply submitted; a refusal ends the turn as an error."""
        if not self._prepared():
            return
        refused = self._submit()
        if refused is not None:
            self._finish(ReplyResult("error", "", None, "error", refused))

    def stop(self) -> None:
        """Any thread: stop the model (or the tool running, or the call waiting for approval, or the documents'
        search); what was written so far is kept and saved as stopped."""
        self.cancel.set()
        if (stream := self.stream) is not None:
            stream.stop()
        if (handle := self.handle) is not None:
            handle.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Any thread but the engine's: True once the turn has ended and its end is handed to the writer."""
        if self.handle is not None and self.prepare is None:
            return self.handle.wait(timeout)  # set after the sink took the job's end (a terminal's Ctrl-C lands here)
        return self._done.wait(timeout)

    # -- a plain reply ----------------------------------------------------------------------------
    def _ended(self, result: ReplyResult) -> None:
        """Engine thread: the reply is saved (or kept by the caller)."""
        assert self.stream is not None
        if self.stream.failure is not None:
            self.failure = HearthError(self.stream.failure)
        self._finish(result)

    # -- a reply with tools -----------------------------------------------------------------------
    def _run_tools(self) -> None:
        """Loop thread: the model's turns and its calls until it answers without one; each turn saved as it ends."""
        tools = self.tools
        assert tools is not None
        if not self._prepared():
            return
        saved = None
        if self.row is not None:
            on_row = self.events.on_row if self.events is not None else None
            row = self.row
            saved = SavedTurns(row.chats, row.conversation_id, row.reply_id, on_row=on_row, cancel=self.cancel)
        hooks: dict[str, Any] = {}  # only the hooks this turn uses: a caller's own loop need not take the others
        if self.events is not None:
            hooks["on_text"] = self.events.on_text
        if saved is not None:
            hooks["sink"] = saved
        try:
            run = tools.loop.run(
                list(self.request.messages or ()),
                self.request.sampling,
                list(tools.servers),
                tool_choice=tools.choice,
                cancel=self.cancel,
                **hooks,
            )
        except Exception as exc:
            logger.info("a reply with tools failed: %s", exc)
            self.failure = exc
            if saved is not None:
                saved.chats.finish_reply(saved.reply_id, "", "error", None, "error", str(exc))
            self._finish(ReplyResult("error", "", None, "error", str(exc)))
            return
        self.run = run
        final = run.final
        status = "stopped" if run.stopped else "done"
        reason = "cancelled" if run.stopped else (final.finish_reason if final is not None else "stop")
        extra = run.unused.as_stats() if run.unused is not None else None  # tools offered, none called
        self._finish(ReplyResult(status, run.reply, final.stats if final is not None else None, reason, None, extra))

    def _finish(self, result: ReplyResult) -> None:
        self.result = result
        try:
            if self.events is not None:
                self.events.on_finished(result)
        finally:
            self._done.set()
