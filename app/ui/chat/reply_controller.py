"""The reply controller: send, regenerate, edit and resend, stop, and the reply in flight, as the Chat page shows
them. The turn itself is the core's (app.core.chat.sending, app.core.chat.turn): planned from the shown rows (a
1,000-message chat is not re-read on every send), written on the chat writer thread, and replied to only once
the write is committed, so the UI never waits behind an fsync. A send in the open chat then appends its two rows
instead of re-reading the thread.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from app.core.chat.context import ContextPlan
from app.core.chat.models import Conversation
from app.core.chat.operations import ChatOperations, SavedTurn
from app.core.chat.retrieval import AttachedDocument
from app.core.chat.sending import NEW_CONVERSATION, ChatTurns, TurnStart
from app.core.chat.store import ChatStore
from app.core.chat.turn import TurnTools
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import HostState
from app.ui.chat.chat_documents import ChatDocuments
from app.ui.chat.chat_tools import ChatTools
from app.ui.chat.composer import ComposerBox, Draft, reason_not_to_send
from app.ui.chat.settings_panel import SettingsPanel
from app.ui.chat.stream import StreamBridge, StreamResult
from app.ui.chat.thread_view import ThreadView
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)


class ReplyController(QObject):
    """Owns the reply in flight (`stream`), the message being edited and the turn being saved.

    Signals (UI thread): `finished(msg_id, StreamResult)`; `changed` when replying or editing changed
    (the composer's controls); `notice(text, level)`; `created(conv_id)` when a send with no chat open
    made one; `retitled(conv_id)` when a first message named its chat."""

    finished = Signal(int, object)
    changed = Signal()
    notice = Signal(str, str)
    created = Signal(int)
    retitled = Signal(int)

    def __init__(
        self,
        host: JobHost,
        store: ChatStore,
        chats: ChatOperations,
        writes: TaskRunner,
        thread_view: ThreadView,
        composer: ComposerBox,
        settings: SettingsPanel,
        parent: QObject | None = None,
        tools: ChatTools | None = None,
        documents: ChatDocuments | None = None,
    ) -> None:
        """`tools`: the chat's MCP tools (a conversation that has servers on replies through them); `documents`:
        the chat's documents (a reply is grounded in the conversation's collections and the files attached)."""
        super().__init__(parent)
        self.tools, self.documents = tools, documents
        self.host, self.store, self.chats, self.writes = host, store, chats, writes
        self.turns = ChatTurns(host, chats, documents.documents if documents is not None else None)
        self.thread_view, self.composer, self.settings = thread_view, composer, settings
        self.host_state: HostState = host.state
        self.stream: StreamBridge | None = None
        self.editing: int | None = None
        self.saving = False  # a turn is being written; sending again waits for it
        self.last_plan: ContextPlan | None = None

    # -- state ----------------------------------------------------------------------------------
    def set_host_state(self, state: HostState) -> None:
        """UI thread (re-posted by HostWatcher)."""
        self.host_state = state

    @property
    def replying(self) -> bool:
        return self.stream is not None or self.saving

    @property
    def reason(self) -> str:
        """Why sending is not possible now ('' when it is)."""
        return reason_not_to_send(self.host_state, self.replying, len(self.composer.attachments.attachments))

    def n_ctx(self, context_length: int | None) -> int:
        """The context a request may fill: the model's, or the conversation's if smaller."""
        model = self.host_state.model
        n = model.n_ctx if model is not None else 0
        return min(n, context_length) if n and context_length else n

    def _n_ctx_for(self, conv: Conversation) -> int:
        # The open chat's context length as the panel shows it (maybe not saved yet).
        shown = self.settings.conv is not None and self.settings.conv.id == conv.id
        return self.n_ctx(self.settings.context_value() if shown else conv.context_length)

    # -- sending --------------------------------------------------------------------------------
    def send(self, text: str | None = None) -> bool:
        """Plan, then save the user turn with the composer's images (and the reply row) on the writer thread;
        the reply starts when they are committed. False when nothing will be generated (the reason is shown)."""
        draft = self.composer.draft() if text is None else Draft(text)
        text = draft.text
        if draft.empty or self.reason or self.chats.closed:
            return False
        if self.editing is not None:
            return self.edit_and_resend(self.editing, text)
        self.settings.save()
        conv_id = self.thread_view.conv_id
        conv = self.chats.get_conversation(conv_id) if conv_id is not None else None
        images = tuple(a.image for a in draft.attachments)
        n_ctx = self._n_ctx_for(conv or NEW_CONVERSATION)
        start = self.turns.send(conv, text, shown=self.thread_view.rows, images=images, n_ctx=n_ctx)
        self.composer.clear()
        return self._save_then_reply(start, draft, sent=True, attached=draft.documents)

    def regenerate(self) -> bool:
        """A new reply to the last user turn; the old reply stays as a branch."""
        conv_id, rows = self.thread_view.conv_id, self.thread_view.rows
        if self.reason or conv_id is None or not rows or self.chats.closed:
            return False
        last = rows[-1].message
        parent = last.parent_id if last.role == "assistant" else last.id
        if parent is None:
            return False
        conv = self.chats.get_conversation(conv_id)
        turns = self.thread_view.turns_to(conv_id, parent)
        return self._save_then_reply(self.turns.regenerate(conv, parent, turns, self._n_ctx_for(conv)))

    def edit_and_resend(self, msg_id: int, text: str) -> bool:
        """Resend an edited user message as a new branch; the old branch is kept."""
        if self.reason or not text.strip() or self.chats.closed:
            return False
        self.settings.save()
        row = self.thread_view.messages.row(msg_id)
        old = row.message if row is not None else self.store.get_message(msg_id)
        if old.role != "user":
            self.notice.emit("Only your own messages can be edited and resent.", "error")
            return False
        conv = self.chats.get_conversation(old.conversation_id)
        before = self.thread_view.turns_to(conv.id, old.parent_id) if old.parent_id is not None else []
        start = self.turns.edit(conv, old, text, before, self._n_ctx_for(conv))
        self.editing = None
        self.composer.clear()
        return self._save_then_reply(start, Draft(text))

    def _save_then_reply(
        self,
        start: TurnStart,
        typed: Draft | None = None,
        sent: bool = False,
        attached: tuple[AttachedDocument, ...] = (),
    ) -> bool:
        """When the turn's write is committed, show it and start the reply (grounded in the files `attached` to
        its message, besides the conversation's collections). If the write fails, the typed text, images and
        files go back into the composer: nothing the user wrote is lost."""

        def saved(turn: SavedTurn) -> None:
            """UI thread."""
            self.saving = False
            if start.retitled and not start.new:
                self.retitled.emit(turn.conversation_id)
            self._reply_saved(start, turn, sent=sent, attached=attached)

        def failed(exc: BaseException) -> None:
            """UI thread."""
            self.saving = False
            if typed is not None and self.composer.draft().empty:
                self.composer.set_draft(typed)
            self.notice.emit(str(exc), "error")
            self.changed.emit()

        self.saving = True
        self.writes.watch(start.saving, saved, failed, owner=self)
        self.changed.emit()
        return start.plan.ok

    def _reply_saved(
        self, start: TurnStart, turn: SavedTurn, sent: bool, attached: tuple[AttachedDocument, ...] = ()
    ) -> None:
        """UI thread: the turn is committed. Start the reply, then show the thread once."""
        plan = start.plan
        self.last_plan = plan
        refused: str | None = None
        try:
            if not plan.ok:
                assert plan.notice is not None  # a plan is refused only with an error notice
                self.notice.emit(plan.notice.text, "error")
            else:
                self.notice.emit(plan.notice.text if plan.notice else "", "info")
                if turn.reply_id is not None:
                    refused = self._start_reply(start, turn, attached)
        finally:
            if start.new:
                self.created.emit(turn.conversation_id)  # the page opens it: the thread is read there
            elif not (sent and self.thread_view.append_sent(turn.conversation_id, turn.parent_id, turn.reply_id)):
                self.thread_view.reload()
            if refused is not None and turn.reply_id is not None:
                self.thread_view.show_finished(turn.reply_id, StreamResult("error", "", None, "error", refused))
            if self.stream is not None:
                self.thread_view.follow_end()
            self.changed.emit()

    def _start_reply(
        self, start: TurnStart, turn: SavedTurn, attached: tuple[AttachedDocument, ...] = ()
    ) -> str | None:
        """Start the reply; the host's refusal, if it refuses (the turn saved the reply row as that error)."""
        reply_id = turn.reply_id
        assert reply_id is not None
        conv = start.conversation
        grounded = self.documents.for_turn(conv, attached) if self.documents is not None else None
        pool = self.documents.pool if self.documents is not None else None
        tool_reply = self.tools.reply_for(conv, reply_id) if self.tools is not None else None
        if tool_reply is not None:
            assert self.tools is not None
            bridge: StreamBridge = tool_reply
            tools = TurnTools(tool_reply.loop, list(conv.tool_servers), self.tools.pool)
            reply = self.turns.reply(start, turn, tool_reply, tools=tools, cancel=tool_reply.cancel, documents=grounded)
        else:
            bridge = StreamBridge(reply_id, turn.conversation_id, parent=self)
            reply = self.turns.reply(start, turn, bridge, documents=grounded, pool=pool)
        bridge.updated.connect(self.thread_view.stream_text)
        bridge.row_added.connect(self._tool_row)
        bridge.finished.connect(self._stream_finished)
        refused = reply.start()
        if refused is not None:
            bridge.deleteLater()
            self.notice.emit(refused, "error")
            return refused
        bridge.turn = reply
        self.stream = bridge
        self.thread_view.begin_stream(reply_id)
        return None

    def _tool_row(self, role: str, msg_id: int) -> None:
        """UI thread: a tool's result or the model's next turn was saved; the thread shows it."""
        self.thread_view.end_streams()  # the turn before it is saved: the thread reads it back
        if role == "assistant":
            self.thread_view.begin_stream(msg_id)
        self.thread_view.reload()
        self.thread_view.follow_end()

    def _stream_finished(self, msg_id: int, result: StreamResult) -> None:
        """UI thread."""
        self.thread_view.show_finished(msg_id, result)
        if self.stream is not None and self.stream.msg_id == msg_id:
            self.stream.deleteLater()
            self.stream = None
        self.changed.emit()
        self.finished.emit(msg_id, result)

    # -- editing and stopping -------------------------------------------------------------------
    def begin_edit(self, msg_id: int, text: str) -> None:
        self.editing = msg_id
        self.composer.set_text(text)
        self.composer.focus()
        self.changed.emit()

    def forget_edit(self) -> None:
        """Another chat was opened: the message being edited is not in it."""
        self.editing = None

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.stop()

    def escape(self) -> None:
        if self.stream is not None:
            self.stop()
        elif self.editing is not None:
            self.editing = None
            self.composer.clear()
            self.changed.emit()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the reply; its text so far goes to the writer as stopped."""
        if self.stream is not None:
            bridge = self.stream
            bridge.stop()
            bridge.wait(timeout)
            bridge.drain()
