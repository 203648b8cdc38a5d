"""The Chat page: conversation list, model bar, message view, composer and settings.

A reply streams into its own conversation: switching to another chat while it streams keeps it
going (the writer saves it; reopening shows the live text). One reply streams at a time.
The user turn is committed before the job is submitted; the reply row is `streaming` until done.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.chat.store import DEFAULT_TITLE, ChatStore
from app.core.runtime.jobs import HostState
from app.ui.chat import render
from app.ui.chat.composer import ComposerControls, ContextMeter, reason_not_to_send, tokens_in_use
from app.ui.chat.conversations import SEARCH_DELAY_MS, ConversationList  # noqa: F401 (re-export)
from app.ui.chat.message_actions import MessageActions, active_branch
from app.ui.chat.message_view import MessageView
from app.ui.chat.messages_model import MessagesModel
from app.ui.chat.model_bar import ModelBar
from app.ui.chat.replies import ReplyFlow
from app.ui.chat.settings_panel import SettingsPanel
from app.ui.chat.stream import ChatWriter, HostWatcher, StreamBridge

logger = logging.getLogger(__name__)


class ChatPage(ReplyFlow, MessageActions, QWidget):
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
        tasks.run(render.warm, owner=self)
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
        left.failed.connect(lambda exc: self._files_done(str(exc), "error"))
        left.search_failed.connect(lambda text: self.show_notice(text, "error"))

        self.model_bar = ModelBar(self.host, library, self.tasks, machine_source, self)
        self.title = QLabel(DEFAULT_TITLE)
        self.title.setObjectName("chatTitle")
        self.title.setMinimumWidth(40)  # a long title shrinks (elided by the layout), not the meter
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.context_meter = ContextMeter()
        self.meter, self.meter_label = self.context_meter.bar, self.context_meter.label
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
        # Rows laid out with estimated heights grow when first painted: stay pinned to the end.
        bar.rangeChanged.connect(lambda _lo, hi: bar.setValue(hi) if self._follow else None)
        self.notice = QLabel(wordWrap=True)
        self.notice.setObjectName("chatNotice")
        self.notice.setVisible(False)
        c = self.composer_controls = ComposerControls()
        self.composer, self.reason = c.composer, c.reason
        self.send_button, self.stop_button, self.regen_button = c.send_button, c.stop_button, c.regen_button
        self.composer.submitted.connect(self.send)
        self.composer.textChanged.connect(self._update_controls)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.regen_button.clicked.connect(self.regenerate)
        center = QWidget()
        cv = QVBoxLayout(center)
        cv.addWidget(self.model_bar)
        cv.addLayout(head)
        cv.addWidget(self.view, 1)
        cv.addWidget(self.notice)
        cv.addWidget(self.composer)
        cv.addLayout(c.row)

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
        path, branches = active_branch(everything, conv.active_leaf_id)
        live = {self.stream.msg_id: self.stream.text} if self.stream is not None else {}
        self.messages.set_messages(path, branches, live)
        self._update_meter()

    def rename_conversation(self, conv_id: int, title: str) -> None:
        self.store.rename_conversation(conv_id, title)
        self._retitled(conv_id)

    def _retitled(self, conv_id: int) -> None:
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

    def _files_done(self, text: str, level: str = "info") -> None:
        self.show_notice(text, level)
        self.files_done.emit(text)

    # -- composer state -------------------------------------------------------------------------
    def _on_host_state(self, state: HostState) -> None:
        self.host_state = state
        self.model_bar.host_state(state)
        self._update_controls()
        self._update_meter()

    @property
    def composer_reason(self) -> str:
        """Why sending is not possible now ('' when it is)."""
        return reason_not_to_send(self.host_state, self.stream is not None or self.saving)

    def _update_controls(self) -> None:
        s = self.host_state
        self.composer_controls.refresh(
            self.composer_reason, loaded=s.model is not None and s.status != "loading", editing=bool(self.editing),
            busy=self.model_bar.busy_text, replying=self.stream is not None or self.saving,
            can_regenerate=self.conv_id is not None and bool(self.messages.rows))

    def n_ctx(self) -> int:
        model = self.host_state.model
        n = model.n_ctx if model is not None else 0
        conv_ctx = self.settings.context_value()
        return min(n, conv_ctx) if n and conv_ctx else n

    def _update_meter(self) -> None:
        n = self.n_ctx()
        if not n or self.conv_id is None:
            self.context_meter.clear()
            return
        used, approx = tokens_in_use(self.messages.rows, self.settings.system_prompt.toPlainText())
        self.context_meter.show_usage(used, n, approx)

    def show_notice(self, text: str, level: str = "info") -> None:
        colour = "#fff8c5" if level == "info" else "#ffebe9"
        self.notice.setStyleSheet(f"background:{colour}; padding:6px; border-radius:4px")
        self.notice.setText(text)
        self.notice.setProperty("level", level)
        self.notice.setVisible(bool(text))

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
