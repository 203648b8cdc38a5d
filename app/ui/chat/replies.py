"""Sending and replies: send, regenerate, edit and resend, stop, and the stream's updates.

A mixin of ChatPage. The request is planned from the shown rows (a 1,000-message chat is not re-read
on every send); the user turn and the reply row are written on the writer thread, and the job is
submitted only once they are committed, so the UI never waits behind an fsync. A send in the open
chat then appends its two rows instead of re-reading the thread.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from app.core.chat.context import ContextPlan, Turn, estimate_tokens, fit_context, history_for_request
from app.core.chat.models import Conversation
from app.core.chat.store import DEFAULT_TITLE
from app.core.engines.base import GenerateRequest
from app.core.runtime.jobs import GenerateJob, HostBusy, HostClosed
from app.ui.chat.stream import StreamBridge, StreamResult

logger = logging.getLogger(__name__)

REPLY_RESERVE = 512


@dataclass(frozen=True)
class Draft:
    """A user turn not saved yet, as the context policy reads it."""

    content: str
    role: str = "user"
    status: str = "done"


class ReplyFlow:
    """Needs the host class to provide host, store, writer, messages, view, composer, settings,
    model_bar, stream, editing, conv_id and the page's notices, meter and controls."""

    saving = False  # a turn is being written; sending again waits for it

    def send(self, text: str | None = None) -> bool:
        """Plan, then save the user turn (and the reply row) on the writer thread; the reply starts
        when they are committed. False when nothing will be generated (the reason is shown)."""
        text = self.composer.toPlainText() if text is None else text
        if not text.strip() or self.composer_reason:
            return False
        if self.editing is not None:
            return self.edit_and_resend(self.editing, text)
        self.settings.save()
        if self.conv_id is None:
            self.new_conversation()
        conv_id, store = self.conv_id, self.store
        conv = store.get_conversation(conv_id)
        plan = self._plan(conv, [*self.messages.rows, Draft(text)])
        title = " ".join(text.split())[:60] if conv.title == DEFAULT_TITLE else None

        def save() -> tuple[int, int | None]:  # writer thread
            user_id = store.add_user_message(conv_id, text)
            if title:
                store.rename_conversation(conv_id, title)
            return user_id, (store.begin_assistant(conv_id, user_id) if plan.ok else None)

        self.composer.clear()
        return self._save_then_reply(save, conv, plan, text, sent=True, retitled=bool(title))

    def regenerate(self) -> bool:
        """A new reply to the last user turn; the old reply stays as a branch."""
        if self.composer_reason or self.conv_id is None or not self.messages.rows:
            return False
        last = self.messages.rows[-1].message
        parent = last.parent_id if last.role == "assistant" else last.id
        if parent is None:
            return False
        conv_id, store = self.conv_id, self.store
        conv = store.get_conversation(conv_id)
        plan = self._plan(conv, self._thread_to(conv_id, parent))
        return self._save_then_reply(
            lambda: (parent, store.begin_assistant(conv_id, parent) if plan.ok else None), conv, plan)

    def edit_and_resend(self, msg_id: int, text: str) -> bool:
        """Resend an edited user message as a new branch; the old branch is kept."""
        if self.composer_reason or not text.strip():
            return False
        self.settings.save()
        row, store = self.messages.row(msg_id), self.store
        old = row.message if row is not None else store.get_message(msg_id)
        if old.role != "user":
            self.show_notice("Only your own messages can be edited and resent.", "error")
            return False
        conv = store.get_conversation(old.conversation_id)
        before = self._thread_to(conv.id, old.parent_id) if old.parent_id is not None else []
        plan = self._plan(conv, [*before, Draft(text)])

        def save() -> tuple[int, int | None]:  # writer thread
            new_id = store.edit_user_message(msg_id, text)
            return new_id, (store.begin_assistant(conv.id, new_id) if plan.ok else None)

        self.editing = None
        self.composer.clear()
        return self._save_then_reply(save, conv, plan, text)

    def _plan(self, conv: Conversation, turns: Sequence[Turn]) -> ContextPlan:
        n_ctx = self.n_ctx()
        reserve = conv.sampling.max_tokens or min(REPLY_RESERVE, max(n_ctx // 4, 1))
        history = history_for_request(conv.system_prompt, turns)
        return fit_context(history, estimate_tokens, n_ctx, reserve=min(reserve, max(n_ctx - 16, 1)))

    def _save_then_reply(self, save: Callable[[], tuple[int, int | None]], conv: Conversation,
                         plan: ContextPlan, typed: str = "", sent: bool = False, retitled: bool = False) -> bool:
        """Run `save` on the writer thread; then show the turn and start the reply. If the write
        fails, the typed text goes back into the composer: nothing the user wrote is lost."""

        def saved(ids: Any) -> None:
            self.saving = False
            if retitled:
                self._retitled(conv.id)
            self._reply_saved(conv, plan, *ids, sent=sent)

        def failed(message: str) -> None:
            self.saving = False
            if typed and not self.composer.toPlainText().strip():
                self.composer.setPlainText(typed)
            self.show_notice(message, "error")
            self._update_controls()

        if not self.writer.call(save, saved, failed):
            return False
        self.saving = True
        self._update_controls()
        return plan.ok

    def _reply_saved(self, conv: Conversation, plan: ContextPlan, parent_id: int, reply_id: int | None,
                     sent: bool) -> None:
        """UI thread: the turn is committed. Start the job, then show the thread once."""
        self.last_plan = plan
        try:
            if not plan.ok:
                self.show_notice(plan.notice.text, "error")
            else:
                self.show_notice(plan.notice.text if plan.notice else "", "info")
                if reply_id is not None:
                    self._submit(conv, plan, reply_id)
        finally:
            if not (sent and self._append_sent(conv.id, parent_id)):
                self.reload_thread()
            if self.stream is not None:
                self._follow = True
                self.view.scrollToBottom()
            self._update_controls()

    def _submit(self, conv: Conversation, plan: ContextPlan, reply_id: int) -> None:
        bridge = StreamBridge(reply_id, conv.id, self.writer, parent=self)
        bridge.updated.connect(self._stream_updated)
        bridge.finished.connect(self._stream_finished)
        request = GenerateRequest(messages=plan.messages, sampling=conv.sampling, conversation_id=str(conv.id))
        try:
            bridge.handle = self.host.submit(GenerateJob(request=request, source="chat"), bridge.sink)
        except (HostBusy, HostClosed) as exc:
            bridge.deleteLater()
            self.writer.submit(self.store.finish_assistant, reply_id, "", "error", None, "error", str(exc))
            self.writer.flush()
            self.show_notice(str(exc), "error")
            return
        self.stream = bridge

    def _append_sent(self, conv_id: int, user_id: int) -> bool:
        """Append the new user turn and its reply to the shown thread, if they follow its last row:
        re-reading a 1,000-message thread on every send would cost the UI tens of milliseconds."""
        if conv_id != self.conv_id:
            return False
        user = self.store.get_message(user_id)
        rows = self.messages.rows
        if user.parent_id != (rows[-1].id if rows else None):
            return False
        self.messages.append(user)
        if self.stream is not None and self.stream.conv_id == conv_id:
            self.messages.append(self.store.get_message(self.stream.msg_id))
        self._update_meter()
        return True

    def _thread_to(self, conv_id: int, parent_id: int) -> Sequence[Turn]:
        """The turns up to `parent_id`: from the shown rows when they hold them (a long chat is not
        re-read from disk on every send), else from the store."""
        if conv_id == self.conv_id and (i := self.messages.row_of(parent_id)) is not None:
            return self.messages.rows[: i + 1]
        thread = self.store.active_path(conv_id)
        cut = next((i for i, m in enumerate(thread) if m.id == parent_id), len(thread) - 1)
        return thread[: cut + 1]

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.stop()

    def _escape(self) -> None:
        if self.stream is not None:
            self.stop()
        elif self.editing is not None:
            self.editing = None
            self.composer.clear()
            self._update_controls()

    def _user_scrolled(self) -> None:
        self._follow = self.view.at_bottom()

    def _stream_updated(self, msg_id: int, text: str) -> None:
        self.messages.update_text(msg_id, text)
        if self._follow:
            self.view.scrollToBottom()

    def _stream_finished(self, msg_id: int, result: StreamResult) -> None:
        stats = asdict(result.stats) if result.stats is not None else None
        self.messages.finish(msg_id, result.status, result.text, stats, result.finish_reason, result.error)
        if self._follow and self.messages.row(msg_id) is not None:
            self.view.scrollToBottom()
        if result.stats is not None and result.status == "done":
            self.model_bar.set_measured(result.stats.decode_tok_s)
        if self.stream is not None and self.stream.msg_id == msg_id:
            self.stream.deleteLater()
            self.stream = None
        self._update_controls()
        self._update_meter()
        self.reply_finished.emit(msg_id, result)
