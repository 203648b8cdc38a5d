"""The Chat page: conversation list, model bar, message view, composer and settings.

A reply streams into its own conversation: switching to another chat while it streams keeps it
going (the writer saves it; reopening shows the live text). One reply streams at a time.
The user turn is committed before the job is submitted; the reply row is `streaming` until done.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.context import context_usage, fit_context, history_for_request
from app.core.chat.models import ChatStoreError, Message
from app.core.chat.store import DEFAULT_TITLE, ChatStore
from app.core.engines.base import ChatMessage, GenerateRequest
from app.core.runtime.jobs import GenerateJob, HostBusy, HostClosed, HostState
from app.ui.chat.conversations import SEARCH_DELAY_MS, ConversationList  # noqa: F401 (re-export)
from app.ui.chat.messages_model import MessagesModel, MessageView
from app.ui.chat.model_bar import ModelBar
from app.ui.chat.settings_panel import SettingsPanel
from app.ui.chat.stream import ChatWriter, HostWatcher, StreamBridge, StreamResult

logger = logging.getLogger(__name__)

REPLY_RESERVE = 512


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """A deliberately high token estimate (the engine's tokenizer lives on the host thread):
    ~3 ASCII characters or 1 other character per token, plus the template's per-message overhead."""
    total = 2
    for m in messages:
        ascii_chars = sum(1 for ch in m.content if ch < "\x80")
        total += ascii_chars // 3 + (len(m.content) - ascii_chars) + 6
    return total


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter is a newline."""

    submitted = Signal()

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatPage(QWidget):
    reply_finished = Signal(int, object)  # message id, StreamResult
    conversation_opened = Signal(int)
    files_done = Signal(str)  # export/import finished: a message for the user

    def __init__(self, host, store: ChatStore, library, tasks, machine_source: Callable[[], object] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host, self.store, self.tasks = host, store, tasks
        self.conv_id: int | None = None
        self.stream: StreamBridge | None = None
        self.editing: int | None = None
        self.last_plan = None
        self.host_state: HostState = host.state
        self.writer = ChatWriter(store, self)
        self.writer.failed.connect(lambda text: self.show_notice(text, "error"))
        self.watcher = HostWatcher(host, self)
        self.watcher.changed.connect(self._on_host_state)
        self._build(library, machine_source)
        self._shortcuts()
        self.refresh_conversations()
        if store.recovered_interrupted:
            n = store.recovered_interrupted
            self.show_notice(f"{n} repl{'ies were' if n != 1 else 'y was'} interrupted when Hearth last"
                             " closed; the saved part is kept and marked “interrupted”.", "info")
        convs = store.list_conversations(limit=1)
        if convs:
            self.open_conversation(convs[0].id)
        self._update_controls()

    # -- layout ---------------------------------------------------------------------------------
    def _build(self, library, machine_source) -> None:
        left = self.conversations = ConversationList(self.store, self.tasks, lambda: self.conv_id)
        self.search, self.conv_list = left.search, left.list
        left.open_requested.connect(self.open_conversation)
        left.new_requested.connect(self.new_conversation)
        left.rename_requested.connect(self.rename_conversation)
        left.delete_requested.connect(self.delete_conversation)
        left.exported.connect(self._files_done)
        left.imported.connect(self._imported)
        left.failed.connect(self._files_failed)

        self.model_bar = ModelBar(self.host, library, self.tasks, machine_source, self)
        self.title = QLabel(DEFAULT_TITLE)
        self.title.setObjectName("chatTitle")
        self.title.setMinimumWidth(40)  # a long title shrinks (elided by the layout), not the meter
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.meter = QProgressBar()
        self.meter.setObjectName("contextMeter")
        self.meter.setMaximumWidth(160)
        self.meter.setTextVisible(False)
        self.meter_label = QLabel()
        self.meter_label.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Preferred)
        # Room for the widest reading up front: a label that grows while text streams gets clipped.
        self.meter_label.setMinimumWidth(self.meter_label.fontMetrics().horizontalAdvance("131,072 / 131,072 tokens"))
        self.settings_button = QToolButton(text="Settings", checkable=True)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.meter_label)
        head.addWidget(self.meter)
        head.addWidget(self.settings_button)

        self.messages = MessagesModel(self)
        self.view = MessageView()
        self.view.setModel(self.messages)
        self.view.anchor_clicked.connect(self._anchor)
        self.view.context_requested.connect(self._context_menu)
        self._follow = True  # keep the newest text in view until the user scrolls away
        bar = self.view.verticalScrollBar()
        bar.actionTriggered.connect(lambda _a: QTimer.singleShot(0, self._user_scrolled))
        self.notice = QLabel(wordWrap=True)
        self.notice.setObjectName("chatNotice")
        self.notice.setVisible(False)
        self.composer = Composer()
        self.composer.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.composer.setMaximumHeight(110)
        self.composer.submitted.connect(self.send)
        self.composer.textChanged.connect(self._update_controls)
        self.reason = QLabel()
        self.reason.setObjectName("composerReason")
        self.send_button = QPushButton("Send")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.clicked.connect(self.regenerate)
        actions = QHBoxLayout()
        actions.addWidget(self.reason, 1)
        for b in (self.regen_button, self.stop_button, self.send_button):
            actions.addWidget(b)
        center = QWidget()
        cv = QVBoxLayout(center)
        cv.addWidget(self.model_bar)
        cv.addLayout(head)
        cv.addWidget(self.view, 1)
        cv.addWidget(self.notice)
        cv.addWidget(self.composer)
        cv.addLayout(actions)

        self.settings = SettingsPanel(self.store)
        self.settings.setVisible(False)
        self.settings.error.connect(lambda t: self.show_notice(t, "error"))
        self.settings.saved.connect(lambda _c: self._update_meter())
        self.settings_button.toggled.connect(self.settings.setVisible)
        split = QSplitter()
        for w in (left, center, self.settings):
            split.addWidget(w)
        split.setStretchFactor(1, 1)
        split.setSizes([220, 700, 260])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def _shortcuts(self) -> None:
        for keys, slot in (("Ctrl+N", self.new_conversation), ("Ctrl+L", self.composer.setFocus),
                           ("Esc", self._escape), ("Ctrl+R", self.regenerate), ("Ctrl+F", self.search.setFocus)):
            sc = QShortcut(QKeySequence(keys), self)
            sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            sc.activated.connect(slot)

    # -- conversations --------------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        self.conversations.refresh(self.conv_id)

    def new_conversation(self) -> int:
        base = self.store.get_conversation(self.conv_id) if self.conv_id else None
        conv = self.store.create_conversation(
            system_prompt=base.system_prompt if base else "", sampling=base.sampling if base else None,
            preset_id=base.preset_id if base else None)
        self.search.clear()
        self.refresh_conversations()
        self.open_conversation(conv.id)
        self.composer.setFocus()
        return conv.id

    def open_conversation(self, conv_id: int) -> None:
        self.settings.save()
        conv = self.store.get_conversation(conv_id)
        self.conv_id = conv.id
        self.editing = None
        self.title.setText(conv.title)
        self.settings.set_conversation(conv)
        self.reload_thread()
        self.conversations.select(conv_id)
        self._follow = True
        self.view.scrollToBottom()
        self._update_controls()
        self.conversation_opened.emit(conv_id)

    def reload_thread(self) -> None:
        """Read the shown branch (one query) with each message's position among its siblings."""
        if self.conv_id is None:
            self.messages.set_messages([])
            return
        conv = self.store.get_conversation(self.conv_id)
        everything = self.store.all_messages(self.conv_id)
        by_id = {m.id: m for m in everything}
        siblings: dict[int | None, list[int]] = {}
        for m in everything:
            siblings.setdefault(m.parent_id, []).append(m.id)
        path: list[Message] = []
        node = by_id.get(conv.active_leaf_id) if conv.active_leaf_id is not None else None
        while node is not None:
            path.append(node)
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
        path.reverse()
        branches = {m.id: (siblings[m.parent_id].index(m.id) + 1, len(siblings[m.parent_id])) for m in path}
        live = {self.stream.msg_id: self.stream.text} if self.stream is not None else {}
        self.messages.set_messages(path, branches, live)
        self._update_meter()

    def rename_conversation(self, conv_id: int, title: str) -> None:
        self.store.rename_conversation(conv_id, title)
        if conv_id == self.conv_id:
            self.title.setText(self.store.get_conversation(conv_id).title)
        self.refresh_conversations()

    def delete_conversation(self, conv_id: int) -> None:
        if self.stream is not None and self.stream.conv_id == conv_id:
            self.stop()
            self.writer.flush()
        self.store.delete_conversation(conv_id)
        if conv_id == self.conv_id:
            self.conv_id = None
            self.settings.set_conversation(None)
            self.messages.set_messages([])
            self.title.setText("")
        self.refresh_conversations()
        if self.conv_id is None and (first := self.conversations.first_id()) is not None:
            self.open_conversation(first)
        self._update_controls()

    # -- export / import (file I/O off the UI thread) --------------------------------------------
    def export_to(self, path: Path, fmt: str) -> None:
        self.conversations.export_to(self.conv_id, path, fmt)

    def import_from(self, path: Path) -> None:
        self.conversations.import_from(path)

    def _imported(self, conv_id: int) -> None:
        self.refresh_conversations()
        self.open_conversation(conv_id)
        self._files_done("Imported the chat")

    def _files_done(self, text: str) -> None:
        self.show_notice(text, "info")
        self.files_done.emit(text)

    def _files_failed(self, exc: BaseException) -> None:
        self.show_notice(str(exc), "error")
        self.files_done.emit(str(exc))

    # -- composer state -------------------------------------------------------------------------
    def _on_host_state(self, state: HostState) -> None:
        self.host_state = state
        self.model_bar.host_state(state)
        self._update_controls()
        self._update_meter()

    @property
    def composer_reason(self) -> str:
        """Why sending is not possible now ('' when it is)."""
        s = self.host_state
        if s.status == "loading":
            return "Loading the model…"
        if s.model is None:
            return "The model failed to load (see above)" if s.status == "error" else "Load a model to chat"
        if self.stream is not None:
            return "Replying… (Esc to stop)"
        return ""

    def _update_controls(self) -> None:
        reason = self.composer_reason
        loaded = self.host_state.model is not None and self.host_state.status != "loading"
        self.composer.setEnabled(loaded)
        busy = self.model_bar.busy_text
        edit = "Editing a message: Enter resends it, Esc cancels" if self.editing else ""
        self.reason.setText(reason or edit or (f"{busy}: your message waits its turn" if busy else ""))
        self.send_button.setEnabled(not reason and bool(self.composer.toPlainText().strip()))
        self.stop_button.setEnabled(self.stream is not None)
        self.regen_button.setEnabled(not reason and self.conv_id is not None and bool(self.messages.rows))

    def n_ctx(self) -> int:
        model = self.host_state.model
        n = model.n_ctx if model is not None else 0
        conv_ctx = self.settings.context_value()
        return min(n, conv_ctx) if n and conv_ctx else n

    def _update_meter(self) -> None:
        n = self.n_ctx()
        if not n or self.conv_id is None:
            self.meter_label.setText("")
            self.meter.setValue(0)
            return
        rows = self.messages.rows
        last = rows[-1] if rows else None
        if last is not None and last.stats and last.stats.get("prompt_tokens"):
            used, approx = int(last.stats["prompt_tokens"]) + int(last.stats.get("generated_tokens", 0)), ""
        else:
            msgs = history_for_request(self.settings.system_prompt.toPlainText(), [r.message for r in rows])
            used, approx = estimate_tokens(msgs) if msgs else 0, "~"
        level = context_usage(used, n)
        self.meter.setRange(0, n)
        self.meter.setValue(min(used, n))
        colour = {"ok": "#2da44e", "warn": "#d4a72c", "full": "#cf222e"}[level]
        self.meter.setStyleSheet(f"QProgressBar::chunk {{ background: {colour}; }}")
        warn = {"ok": "", "warn": " · near the limit", "full": " · context full"}[level]
        self.meter_label.setText(f"{approx}{used:,} / {n:,} tokens{warn}")
        self.meter_label.setProperty("level", level)

    def show_notice(self, text: str, level: str = "info") -> None:
        colour = "#fff8c5" if level == "info" else "#ffebe9"
        self.notice.setStyleSheet(f"background:{colour}; padding:6px; border-radius:4px")
        self.notice.setText(text)
        self.notice.setProperty("level", level)
        self.notice.setVisible(bool(text))

    # -- sending --------------------------------------------------------------------------------
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
        self.reload_thread()
        return self._start_reply(conv_id, user_id)

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
        self.reload_thread()
        return self._start_reply(self.store.get_message(new_id).conversation_id, new_id)

    def _start_reply(self, conv_id: int, parent_id: int) -> bool:
        conv = self.store.get_conversation(conv_id)
        thread = [m for m in self.store.active_path(conv_id)]
        cut = next((i for i, m in enumerate(thread) if m.id == parent_id), len(thread) - 1)
        history = history_for_request(conv.system_prompt, thread[: cut + 1])
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
            self.reload_thread()
            return False
        self.stream = bridge
        self.reload_thread()
        self._follow = True
        self.view.scrollToBottom()
        self._update_controls()
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

    # -- message actions ------------------------------------------------------------------------
    def _anchor(self, msg_id: int, href: str) -> None:
        row = self.messages.row(msg_id)
        if row is None:
            return
        kind, _, arg = href.partition(":")
        if href.startswith("copy:") and row.rendered is not None and arg.isdigit():
            blocks = row.rendered.code_blocks
            if int(arg) < len(blocks):
                QGuiApplication.clipboard().setText(blocks[int(arg)])
        elif href == "think:toggle":
            self.messages.toggle_reasoning(msg_id)
        elif kind == "act":
            {"copy": self.copy_message, "edit": self.begin_edit, "delete": self.delete_message}[arg](msg_id)
        elif kind == "branch":
            self.switch_branch(msg_id, -1 if arg == "prev" else 1)
        else:  # a link in the text: never opened by a click
            QGuiApplication.clipboard().setText(href)
            self.show_notice(f"Links are not opened from chats. Copied: {href}", "info")

    def _context_menu(self, msg_id: int, pos) -> None:
        row = self.messages.row(msg_id)
        if row is None:
            return
        menu = QMenu(self)
        menu.addAction("Copy", lambda: self.copy_message(msg_id))
        if row.message.role == "user":
            menu.addAction("Edit and resend", lambda: self.begin_edit(msg_id))
        if row is self.messages.rows[-1] and row.message.role == "assistant":
            menu.addAction("Regenerate", self.regenerate)
        menu.addAction("Delete", lambda: self.delete_message(msg_id))
        menu.popup(pos)

    def copy_message(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is not None:
            QGuiApplication.clipboard().setText(row.text)

    def begin_edit(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is None or row.message.role != "user":
            return
        self.editing = msg_id
        self.composer.setPlainText(row.text)
        self.composer.setFocus()
        self._update_controls()

    def delete_message(self, msg_id: int) -> None:
        if self.stream is not None and self.stream.msg_id == msg_id:
            self.stop()
            return  # deleting a reply mid-stream: stop it; delete the kept part afterwards
        try:
            self.store.delete_message(msg_id)
        except ChatStoreError as exc:
            self.show_notice(str(exc), "error")
        self.reload_thread()
        self._update_controls()

    def switch_branch(self, msg_id: int, step: int) -> None:
        siblings = self.store.branches(msg_id)
        ids = [m.id for m in siblings]
        target = ids[(ids.index(msg_id) + step) % len(ids)]
        self.store.switch_branch(target)
        self.reload_thread()

    # -- lifecycle ------------------------------------------------------------------------------
    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the reply (its text is saved as stopped), detach from the host, finish writes."""
        self.settings.save()
        self.watcher.detach()
        if self.stream is not None:
            bridge = self.stream
            bridge.stop()
            if bridge.handle is not None:
                bridge.handle.wait(timeout)
            bridge._drain()
        self.writer.close()
