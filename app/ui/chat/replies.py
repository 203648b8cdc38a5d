"""Sending and replies: send, regenerate, edit and resend, stop, and the stream's updates.

A mixin of ChatPage. A send in the open chat appends its two rows instead of re-reading the thread,
and the request's history comes from the shown rows: a 1,000-message chat is not re-read from disk
(nor re-laid out) on every send.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Sequence

from app.core.chat.context import Turn, fit_context, history_for_request
from app.core.chat.models import ChatStoreError
from app.core.chat.store import DEFAULT_TITLE
from app.core.engines.base import GenerateRequest
from app.core.runtime.jobs import GenerateJob, HostBusy, HostClosed
from app.ui.chat.composer import estimate_tokens
from app.ui.chat.stream import StreamBridge, StreamResult

logger = logging.getLogger(__name__)

REPLY_RESERVE = 512


class ReplyFlow:
    """Needs the host class to provide host, store, writer, messages, view, composer, settings,
    model_bar, stream, editing, conv_id and the page's notices, meter and controls."""

    def send(self, text: str | None = None) -> bool:
        text = self.composer.toPlainText() if text is None else text
        if not text.strip() or self.composer_reason:
            return False
        if self.editing is not None:
            return self.edit_and_resend(self.editing, text)
        self.settings.save()
        if self.conv_id is None:
            self.new_conversation()
        conv_id = self.conv_id
        try:
            user_id = self.store.add_user_message(conv_id, text)  # committed before the job exists
            if self.store.get_conversation(conv_id).title == DEFAULT_TITLE:
                self.rename_conversation(conv_id, " ".join(text.split())[:60])
        except ChatStoreError as exc:
            self.show_notice(str(exc), "error")
            return False
        self.composer.clear()
        return self._start_reply(conv_id, user_id, sent=True)

    def regenerate(self) -> bool:
        """A new reply to the last user turn; the old reply stays as a branch."""
        if self.composer_reason or self.conv_id is None or not self.messages.rows:
            return False
        last = self.messages.rows[-1].message
        parent = last.parent_id if last.role == "assistant" else last.id
        if parent is None:
            return False
        return self._start_reply(self.conv_id, parent)

    def edit_and_resend(self, msg_id: int, text: str) -> bool:
        """Resend an edited user message as a new branch; the old branch is kept."""
        if self.composer_reason or not text.strip():
            return False
        self.settings.save()
        try:
            new_id = self.store.edit_user_message(msg_id, text)
        except (ChatStoreError, ValueError) as exc:
            self.show_notice(str(exc), "error")
            return False
        self.editing = None
        self.composer.clear()
        return self._start_reply(self.store.get_message(new_id).conversation_id, new_id)

    def _start_reply(self, conv_id: int, parent_id: int, sent: bool = False) -> bool:
        """Start the reply to `parent_id`, then show the thread once, whatever happened.
        `sent`: `parent_id` is a user turn just added after the shown leaf."""
        try:
            return self._begin_reply(conv_id, parent_id)
        finally:
            if not (sent and self._append_sent(conv_id, parent_id)):
                self.reload_thread()
            if self.stream is not None:
                self._follow = True
                self.view.scrollToBottom()
            self._update_controls()

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
        rows = self.messages.rows
        if conv_id == self.conv_id:
            i = self.messages.row_of(parent_id)
            if i is not None:
                return rows[: i + 1]
            parent = self.store.get_message(parent_id)
            if parent.parent_id == (rows[-1].id if rows else None):  # a turn just sent after the shown leaf
                return [*rows, parent]
        thread = self.store.active_path(conv_id)
        cut = next((i for i, m in enumerate(thread) if m.id == parent_id), len(thread) - 1)
        return thread[: cut + 1]

    def _begin_reply(self, conv_id: int, parent_id: int) -> bool:
        conv = self.store.get_conversation(conv_id)
        history = history_for_request(conv.system_prompt, self._thread_to(conv_id, parent_id))
        n_ctx = self.n_ctx()
        sampling = conv.sampling
        reserve = sampling.max_tokens or min(REPLY_RESERVE, max(n_ctx // 4, 1))
        plan = fit_context(history, estimate_tokens, n_ctx, reserve=min(reserve, max(n_ctx - 16, 1)))
        self.last_plan = plan
        if not plan.ok:
            self.show_notice(plan.notice.text, "error")
            return False
        self.show_notice(plan.notice.text if plan.notice else "", "info")
        try:
            msg_id = self.store.begin_assistant(conv_id, parent_id)
        except ChatStoreError as exc:
            self.show_notice(str(exc), "error")
            return False
        bridge = StreamBridge(msg_id, conv_id, self.writer, parent=self)
        bridge.updated.connect(self._stream_updated)
        bridge.finished.connect(self._stream_finished)
        request = GenerateRequest(messages=plan.messages, sampling=sampling, conversation_id=str(conv_id))
        try:
            bridge.handle = self.host.submit(GenerateJob(request=request, source="chat"), bridge.sink)
        except (HostBusy, HostClosed) as exc:
            bridge.deleteLater()
            self.writer.submit(self.store.finish_assistant, msg_id, "", "error", None, "error", str(exc))
            self.writer.flush()
            self.show_notice(str(exc), "error")
            return False
        self.stream = bridge
        return True

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
