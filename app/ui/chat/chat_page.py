"""The Chat page: wires the conversation list, model bar, header, thread, composer, settings and the
reply controller, each of which owns its part.

A reply streams into its own conversation: switching to another chat while it streams keeps it
going (the writer saves it; reopening shows the live text). One reply streams at a time.
Every write runs on the chat writer thread (ChatOperations); the page only reads on the UI thread and
shows the answers of writes when `TaskRunner` delivers them. A rename or a deletion shows at once
(reads see writes in flight) and is undone on screen if it fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QResizeEvent, QShortcut, QShowEvent, QTextCursor
from PySide6.QtWidgets import QLabel, QSplitter, QStackedWidget, QVBoxLayout, QWidget

from app.core.chat.models import ChatNotFound, Conversation
from app.core.chat.operations import ChatOperations
from app.core.chat.retrieval import DocumentSearch
from app.core.chat.store import ChatStore
from app.core.engines.remote import FORMAT as REMOTE_FORMAT
from app.core.library.store import Library, LocalModel
from app.core.mcp.servers import McpServers
from app.core.models.devices import Machine
from app.core.runtime.chat_templates import TemplatePrefs
from app.core.runtime.drafts import DraftPrefs
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import HostState
from app.ui.bridge import EventBridge
from app.ui.chat import render
from app.ui.chat.approval_bar import ApprovalBar
from app.ui.chat.attachments import ImageAttacher
from app.ui.chat.chat_documents import ChatDocuments
from app.ui.chat.chat_tools import ChatTools
from app.ui.chat.composer import ComposerBox, vision_reason
from app.ui.chat.conversation_edits import ConversationEdits
from app.ui.chat.conversations import ConversationList
from app.ui.chat.header import ChatHeader, tokens_in_use
from app.ui.chat.model_bar import ModelBar
from app.ui.chat.reply_controller import ReplyController
from app.ui.chat.settings_dock import SettingsDock
from app.ui.chat.settings_panel import SettingsPanel
from app.ui.chat.source_panel import SourcePanel
from app.ui.chat.stream import HostWatcher, StreamResult
from app.ui.chat.thread_view import ThreadView
from app.ui.chat.unsent import UnsentDrafts
from app.ui.tasks import TaskRunner
from app.ui.theme import restyle_by

logger = logging.getLogger(__name__)

SHORT_PAGE_HEIGHT = 700  # px of chat page: below it, the loaded-models strip keeps to one line
TALL_PAGE_ROWS = 4  # loaded models listed over a taller chat before the others scroll
COMPOSER_HEIGHT, SHORT_COMPOSER_HEIGHT = 110, 64  # px of message box: about five lines, or three


class ChatPage(QWidget):
    reply_finished = Signal(int, object)  # message id, StreamResult
    conversation_opened = Signal(int)
    files_done = Signal(str)  # export/import finished: a message for the user

    def __init__(
        self,
        host: JobHost,
        store: ChatStore,
        library: Library | None,
        tasks: TaskRunner,
        machine_source: Callable[[], Machine | None] | None = None,
        parent: QWidget | None = None,
        remote_models: Callable[[], list[LocalModel]] | None = None,
        parallel: Callable[[], int] | None = None,
        drafts: DraftPrefs | None = None,
        serving: Callable[[], bool] | None = None,
        tools: McpServers | None = None,
        tool_steps: Callable[[], int] = lambda: 10,
        templates: TemplatePrefs | None = None,
        documents: DocumentSearch | None = None,
    ) -> None:
        """`remote_models()`: the remote servers' models, listed in the picker beside the library's;
        `parallel`, `serving` (whether the API server is up) and `drafts`: what the model bar's loads plan
        with (see ModelBar); `tools`: the MCP servers a conversation can turn on, `tool_steps` their limit;
        `templates`: the chat template picked per model (the model bar's Advanced); `documents`: the
        collections a conversation can answer from (the Documents menu)."""
        super().__init__(parent)
        self.store = store  # the page's model: reads here, writes through `chats`
        self.chats = ChatOperations(store)
        # The answers of this page's writes; closed at shutdown, when the store may close next.
        self.writes = TaskRunner(parent=self)
        self.write_failures = EventBridge(self.chats.failed, self)
        self.write_failures.fired.connect(lambda text: self.show_notice(text, "error"))
        tasks.run(render.warm, owner=self)
        self.watcher = HostWatcher(host, self)
        self._last_status = host.state.status  # a load is over when it goes from "loading" to "ready"
        self.watcher.changed.connect(self._on_host_state)

        self.conversations = ConversationList(self.chats, tasks, lambda: self.conv_id)
        self.model_bar = ModelBar(
            host,
            library,
            tasks,
            machine_source,
            self,
            remote_models=remote_models,
            parallel=parallel,
            drafts=drafts,
            serving=serving,
            templates=templates,
        )
        self.header = ChatHeader()
        self.thread_view = ThreadView(store, self.chats, self.writes, tasks=tasks)
        self.notice = QLabel(wordWrap=True)
        self.notice.setObjectName("chatNotice")
        self.notice.setVisible(False)
        self.composer = ComposerBox()
        self.attacher = ImageAttacher(self.composer, tasks, self)
        self.unsent = UnsentDrafts(self.composer)
        self.settings = SettingsPanel(store, self.chats, self.writes)
        self.approval = ApprovalBar()
        self._conv: Conversation | None = None  # the open conversation as last read
        self.tools = ChatTools(
            tools,
            host,
            self.chats,
            self.writes,
            self.header.tools_button,
            self.approval,
            self._open_conversation,
            tool_steps,
            self,
        )
        self.documents = ChatDocuments(
            documents,
            self.chats,
            self.writes,
            tasks,
            self.header.documents_button,
            self.composer,
            self._open_conversation,
            self,
        )
        self.source_panel = SourcePanel()
        self.replies = ReplyController(
            host,
            store,
            self.chats,
            self.writes,
            self.thread_view,
            self.composer,
            self.settings,
            self,
            self.tools,
            self.documents,
        )
        self.edits = ConversationEdits(
            self.chats,
            self.writes,
            self,
            conversations=self.conversations,
            thread_view=self.thread_view,
            header=self.header,
            composer=self.composer,
            settings=self.settings,
            replies=self.replies,
            unsent=self.unsent,
            open_conversation=self.open_conversation,
            update_controls=self._update_controls,
            write_failed=self._write_failed,
        )
        self._layout()
        self._wire()
        self._shortcuts()
        self.refresh_conversations()
        if store.recovered_interrupted:
            n = store.recovered_interrupted
            self.show_notice(
                f"{n} repl{'ies were' if n != 1 else 'y was'} interrupted when Hearth last"
                " closed; the saved part is kept and marked “interrupted”.",
                "info",
            )
        convs = self.chats.list_conversations(limit=1)
        if convs:
            self.open_conversation(convs[0].id)
        self._show_model_in_empty_thread()
        self._update_controls()

    def _open_conversation(self) -> Conversation | None:
        """The open conversation as last read (its tools are refreshed when they are saved)."""
        conv = self._conv
        return conv if conv is not None and conv.id == self.conv_id else None

    @property
    def conv_id(self) -> int | None:
        """The conversation shown (None when there is none)."""
        return self.thread_view.conv_id

    # -- layout and wiring ----------------------------------------------------------------------
    def _layout(self) -> None:
        center = QWidget()
        cv = QVBoxLayout(center)
        cv.addWidget(self.model_bar)
        cv.addWidget(self.header)
        thread_stack = QStackedWidget()  # the thread, or the settings on a window too narrow for both
        thread_stack.addWidget(self.thread_view)
        # A citation's passage opens beside the thread, above the composer (the settings column is the page's).
        self.thread_split = QSplitter()
        self.thread_split.setChildrenCollapsible(False)
        self.thread_split.addWidget(thread_stack)
        self.thread_split.addWidget(self.source_panel)
        self.thread_split.setStretchFactor(0, 1)
        cv.addWidget(self.thread_split, 1)
        cv.addWidget(self.notice)
        cv.addWidget(self.approval)
        cv.addWidget(self.composer)
        split = QSplitter()
        for w in (self.conversations, center):
            split.addWidget(w)
        split.setStretchFactor(1, 1)
        split.setSizes([220, 700])
        self.settings_dock = SettingsDock(self.settings, split, center, thread_stack, self.thread_view)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def _wire(self) -> None:
        left = self.conversations
        left.open_requested.connect(self.open_conversation)
        left.new_requested.connect(self.new_conversation)
        left.rename_requested.connect(self.edits.rename)
        left.delete_requested.connect(self.edits.delete)
        left.import_requested.connect(self.import_from)
        left.exported.connect(self._files_done)
        left.failed.connect(lambda exc: self._files_done(str(exc), "error"))
        left.search_failed.connect(lambda text: self.show_notice(text, "error"))
        self.header.settings_button.toggled.connect(self.settings_dock.set_open)
        self.thread_view.changed.connect(self._thread_changed)
        self.thread_view.empty.prompt_picked.connect(self._example_picked)
        self.thread_view.notice.connect(self.show_notice)
        self.thread_view.edit_requested.connect(self.replies.begin_edit)
        self.thread_view.regenerate_requested.connect(self.replies.regenerate)
        self.thread_view.stop_requested.connect(self.replies.stop)
        self.composer.send_requested.connect(lambda: self.replies.send())
        self.composer.stop_requested.connect(self.replies.stop)
        self.composer.regenerate_requested.connect(self.replies.regenerate)
        self.composer.text_changed.connect(self._update_controls)
        self.settings.error.connect(lambda t: self.show_notice(t, "error"))
        self.settings.saved.connect(lambda _c: self._update_meter())
        self.replies.changed.connect(self._update_controls)
        self.replies.notice.connect(self.show_notice)
        self.attacher.notice.connect(self.show_notice)
        self.tools.notice.connect(self.show_notice)
        self.tools.changed.connect(lambda conv: setattr(self, "_conv", conv) if conv.id == self.conv_id else None)
        self.documents.notice.connect(self.show_notice)
        self.documents.changed.connect(lambda conv: setattr(self, "_conv", conv) if conv.id == self.conv_id else None)
        self.thread_view.source_requested.connect(self.show_source)
        self.source_panel.notice.connect(self.show_notice)
        self.replies.created.connect(self._created)
        self.replies.retitled.connect(self.edits.show_title)
        self.replies.finished.connect(self._reply_finished)

    def _shortcuts(self) -> None:
        for keys, slot in (
            ("Ctrl+N", self.new_conversation),
            ("Ctrl+L", self.composer.focus),
            ("Esc", self.replies.escape),
            ("Ctrl+R", self.replies.regenerate),
            ("Ctrl+F", self.conversations.search.setFocus),
        ):
            sc = QShortcut(QKeySequence(keys), self)
            sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            sc.activated.connect(slot)

    # -- conversations --------------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        self.conversations.refresh(self.conv_id)

    def new_conversation(self) -> Future:
        """Future[Conversation]: created on the writer thread (with the open chat's settings), then opened."""
        base = self.chats.get_conversation(self.conv_id) if self.conv_id is not None else None
        creating = self.chats.create_conversation(
            system_prompt=base.system_prompt if base else "",
            sampling=base.sampling if base else None,
            preset_id=base.preset_id if base else None,
        )
        self.writes.watch(creating, lambda conv: self._created(conv.id), self._write_failed, owner=self)
        return creating

    def _created(self, conv_id: int) -> None:
        """UI thread: a new conversation is committed (New chat, or a send with none open)."""
        self.conversations.clear_search()
        self.refresh_conversations()
        self.open_conversation(conv_id)
        self.composer.focus()

    def open_conversation(self, conv_id: int) -> None:
        self.settings.save()
        try:
            conv = self.chats.get_conversation(conv_id)
        except ChatNotFound as exc:  # deleted meanwhile
            self.show_notice(str(exc), "error")
            return
        self.unsent.switch(self.conv_id, conv_id, editing=self.replies.editing is not None)
        self.replies.forget_edit()
        self.header.title.setText(conv.title)
        self.settings.set_conversation(conv)
        self._conv = conv
        self.thread_view.show_conversation(conv.id)
        self.tools.refresh()  # once the conversation is the one shown
        self.documents.refresh()
        self.source_panel.hide_source()  # its passage belongs to the chat that was open
        self.conversations.select(conv_id)
        self._update_controls()
        self.conversation_opened.emit(conv_id)

    def show_source(self, msg_id: int, number: int) -> None:
        """UI thread: passage `number` of reply `msg_id` in the side panel (a citation or a Sources line clicked)."""
        row = self.thread_view.messages.row(msg_id)
        source = next((s for s in row.sources if s.number == number), None) if row is not None else None
        if source is None:
            self.show_notice(f"This reply was given no passage [{number}].", "info")
            return
        self.source_panel.show_source(msg_id, source)
        sizes = self.thread_split.sizes()
        if sizes[1] < self.source_panel.minimumWidth():  # first shown: a third of the thread's width
            total = sum(sizes)
            self.thread_split.setSizes([total - total // 3, total // 3])

    def _write_failed(self, exc: BaseException) -> None:
        """UI thread: a write failed; its text is for the user (ChatOperations)."""
        self.show_notice(str(exc), "error")

    # -- export / import (file I/O off the UI thread) --------------------------------------------
    def export_to(self, path: Path, fmt: str) -> None:
        self.conversations.export_to(self.conv_id, path, fmt)

    def import_from(self, path: Path) -> None:
        """Read and written on the writer thread; the imported chat opens once it is committed."""
        self.writes.watch(
            self.chats.import_file(path), self._imported, lambda exc: self._files_done(str(exc), "error"), owner=self
        )

    def _imported(self, conv_id: int) -> None:
        self.refresh_conversations()
        self.open_conversation(conv_id)
        self._files_done("Imported the chat")

    def _files_done(self, text: str, level: str = "info") -> None:
        self.show_notice(text, level)
        self.files_done.emit(text)

    # -- state shown around the thread ----------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt API)
        # The server is started and stopped on its own page: back here, the next load plans for it.
        super().showEvent(event)
        self.model_bar.replan_if_serving_changed()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self.settings_dock.place()  # beside the chat, or in the thread's place, as the width allows
        # A short window: the loaded models take one line (the others scroll) and the message box three,
        # so the thread keeps most of the height.
        short = event.size().height() < SHORT_PAGE_HEIGHT
        self.model_bar.loaded_models.set_max_rows(1 if short else TALL_PAGE_ROWS)
        self.composer.editor.setMaximumHeight(SHORT_COMPOSER_HEIGHT if short else COMPOSER_HEIGHT)

    def _on_host_state(self, state: HostState) -> None:
        """UI thread (re-posted by HostWatcher)."""
        loaded = self._last_status == "loading" and state.status == "ready"
        self._last_status = state.status
        self.replies.set_host_state(state)
        self.model_bar.host_state(state)
        self._show_model_in_empty_thread()
        self._update_controls()
        self._update_meter()
        if loaded and self.isVisible():
            self.composer.focus()  # a model just loaded here: the next thing to do is to type

    def _show_model_in_empty_thread(self) -> None:
        facts, state = self.model_bar.loaded_facts(), self.replies.host_state
        name = facts.name if facts is not None and state.status != "loading" else None
        remote = state.model is not None and state.model.format == REMOTE_FORMAT
        self.thread_view.empty.show_model(name, loading=state.status == "loading", remote=remote)

    def _example_picked(self, text: str) -> None:
        self.composer.set_text(text)
        self.composer.focus()
        self.composer.editor.moveCursor(QTextCursor.MoveOperation.End)

    def _thread_changed(self) -> None:
        self._update_meter()
        self._update_controls()

    def _reply_finished(self, msg_id: int, result: StreamResult) -> None:
        if result.stats is not None and result.status == "done":
            self.model_bar.set_measured(result.stats.decode_tok_s)
        self._update_controls()
        self._update_meter()
        self.reply_finished.emit(msg_id, result)

    def _update_controls(self) -> None:
        s = self.replies.host_state
        editing = "a message being edited keeps its own images" if self.replies.editing is not None else ""
        self.attacher.set_reason(editing or vision_reason(s))
        self.composer.refresh(
            self.replies.reason,
            loaded=s.model is not None and s.status != "loading",
            editing=self.replies.editing is not None,
            busy=self.model_bar.busy_text,
            replying=self.replies.replying,
            can_regenerate=self.conv_id is not None and bool(self.thread_view.rows),
        )

    def _update_meter(self) -> None:
        n = self.replies.n_ctx(self.settings.context_value())
        if not n or self.conv_id is None:
            self.header.meter.clear()
            return
        used, approx = tokens_in_use(self.thread_view.rows, self.settings.system_prompt.toPlainText())
        self.header.meter.show_usage(used, n, approx)

    def restyle(self, colours: Mapping[str, str], dark: bool) -> None:
        """Main thread: the theme changed; messages render again in its colours."""
        render.use_look(render.ChatLook.from_palette(colours, dark))
        view = self.thread_view.view
        view.doItemsLayout()
        view.viewport().update()

    def show_notice(self, text: str, level: str = "info") -> None:
        self.notice.setText(text)
        restyle_by(self.notice, "level", level)  # the theme's notice colours (hearth.qss)
        self.notice.setVisible(bool(text))

    # -- lifecycle ------------------------------------------------------------------------------
    def shutdown(self, timeout: float = 10.0) -> None:
        """Save pending settings, stop the reply (its text is saved as stopped), detach from the host,
        finish the writes (the one wait on them, here at the end), then deliver no more answers."""
        self.settings.save()
        self.watcher.detach()
        self.replies.shutdown(timeout)
        self.tools.shutdown()
        self.documents.shutdown()
        self.chats.close(timeout)
        self.writes.close()
        self.write_failures.close()
