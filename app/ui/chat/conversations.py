"""The chat list beside the thread: new, search, open, rename/delete, export/import.

It asks (dialogs) and lists; the page does the work, so a reply streaming into a chat is stopped by the
page's rules. It lists through ChatOperations, so a rename or a deletion not yet committed already shows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, QStandardPaths, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.chat import export
from app.core.chat.models import Conversation
from app.core.chat.operations import ChatOperations
from app.ui.file_dialogs import open_file_name, save_file_name
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

SEARCH_DELAY_MS = 200


class _ListWidthDelegate(QStyledItemDelegate):
    """Rows as wide as the list, not as their title: QListView elides a row's text to the row, and a
    row sized to a long title ran past the list's edge, so the title was clipped with no "…"."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        return QSize(0, super().sizeHint(option, index).height())  # a list row widens to the list


class ConversationList(QWidget):
    """`current()` names the open chat (or None); requests go out as signals for the page to carry out."""

    open_requested = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    import_requested = Signal(object)  # the Path of a chat export to import
    exported = Signal(str)  # a message for the user
    failed = Signal(object)  # the exception from an export
    search_failed = Signal(str)  # a message for the user

    def __init__(
        self, chats: ChatOperations, tasks: TaskRunner, current: Callable[[], int | None], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.chats, self.tasks, self._current = chats, tasks, current
        self._query_seq = 0  # answers to older searches are dropped
        self.search = QLineEdit(placeholderText="Search chats (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(lambda: self.refresh(self._current()))
        self.search.textChanged.connect(lambda _t: self._search_timer.start())
        # Says a search found nothing; an empty list alone looked like the chats were gone.
        self.no_match = QLabel(wordWrap=True)
        self.no_match.setObjectName("conversationsNoMatch")
        set_status(self.no_match, "muted")
        self.no_match.setTextFormat(Qt.TextFormat.PlainText)  # the query is the user's text, never markup
        self.no_match.setVisible(False)
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        # Long titles end in "…" (full title in the tooltip) instead of a sideways scroll bar.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(_ListWidthDelegate(self.list))
        self.list.itemClicked.connect(lambda it: self.open_requested.emit(it.data(Qt.ItemDataRole.UserRole)))
        self.list.itemDoubleClicked.connect(lambda it: self._ask_rename(it.data(Qt.ItemDataRole.UserRole)))
        new = QPushButton("New chat")
        new.clicked.connect(lambda: self.new_requested.emit())
        more = QToolButton()
        more.setText("⋯")
        more.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(more)
        menu.addAction("Rename…", self._ask_rename_current)
        menu.addAction("Delete…", self._ask_delete)
        menu.addSeparator()
        menu.addAction("Export as Markdown…", lambda: self._ask_export("md"))
        menu.addAction("Export as JSON…", lambda: self._ask_export("json"))
        menu.addAction("Import JSON…", self._ask_import)
        more.setMenu(menu)
        lv = QVBoxLayout(self)
        buttons = QHBoxLayout()
        buttons.addWidget(new, 1)
        buttons.addWidget(more)
        lv.addLayout(buttons)
        lv.addWidget(self.search)
        lv.addWidget(self.no_match)
        lv.addWidget(self.list, 1)

    # -- the list -------------------------------------------------------------------------------
    def refresh(self, current: int | None) -> None:
        """List the chats. A search reads every message's text, so it runs on the pool and only the
        newest query's answer is shown; the plain list (by an index) is read here."""
        query = self.search.text().strip()
        self._query_seq += 1
        if not query:
            self._show(self.chats.list_conversations(), current)
            return
        seq, chats = self._query_seq, self.chats
        self.tasks.run(
            lambda: chats.search(query, limit=500),
            lambda convs: self._show(convs, self._current(), query) if seq == self._query_seq else None,
            lambda exc: self.search_failed.emit(f"Search failed: {exc}"),
            owner=self,
        )

    def clear_search(self) -> None:
        self.search.clear()

    def _show(self, convs: list[Conversation], current: int | None, query: str = "") -> None:
        """`query`: the search these are the answer to ('' for the plain list)."""
        self.list.clear()
        self.no_match.setText(f"No conversations match “{query}”." if query and not convs else "")
        self.no_match.setVisible(bool(query) and not convs)
        for c in convs:
            item = QListWidgetItem(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setToolTip(c.title)
            self.list.addItem(item)
            if c.id == current:
                self.list.setCurrentItem(item)

    def select(self, conv_id: int) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == conv_id:
                self.list.setCurrentRow(i)

    def first_id(self, skip: int | None = None) -> int | None:
        """The top chat's id, passing over `skip` (one being deleted that a listing may still hold)."""
        ids = (self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count()))
        return next((i for i in ids if i != skip), None)

    # -- rename / delete ------------------------------------------------------------------------
    def _ask_rename_current(self) -> None:
        if (conv_id := self._current()) is not None:
            self._ask_rename(conv_id)

    def _ask_rename(self, conv_id: int) -> None:
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=self.chats.get_conversation(conv_id).title)
        if ok:
            self.rename_requested.emit(conv_id, title)

    def _ask_delete(self) -> None:
        conv_id = self._current()
        if (
            conv_id is not None
            and QMessageBox.question(self, "Delete chat", "Delete this chat and all its messages?")
            == QMessageBox.StandardButton.Yes
        ):
            self.delete_requested.emit(conv_id)

    # -- export (file I/O off the UI thread) ------------------------------------------------------
    def export_to(self, conv_id: int | None, path: Path, fmt: str) -> None:
        if conv_id is None:
            return
        store = self.chats.store

        def op() -> str:
            text = export.export_markdown(store, conv_id) if fmt == "md" else export.export_json(store, conv_id)
            Path(path).write_text(text, encoding="utf-8")
            return f"Exported to {path}"

        self.tasks.run(op, self.exported.emit, self.failed.emit, owner=self)

    def export_suggestion(self, fmt: str) -> Path:
        """Where Export offers to save the current chat: the Documents folder, named after the chat."""
        conv_id = self._current()
        title = self.chats.get_conversation(conv_id).title if conv_id is not None else ""
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        return Path(folder or Path.home()) / export.export_file_name(title, fmt)

    def _ask_export(self, fmt: str) -> None:
        if self._current() is None:
            return
        filt = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        path = save_file_name(self, "Export chat", self.export_suggestion(fmt), filt)
        if path:
            self.export_to(self._current(), Path(path), fmt)

    def _ask_import(self) -> None:
        path = open_file_name(self, "Import chat", Path.home(), "JSON (*.json)")
        if path:
            self.import_requested.emit(Path(path))
