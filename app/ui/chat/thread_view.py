"""The shown thread: its model and view, following the newest text, and what the user can do to one
message (copy, edit and resend, delete, switch branch, follow its links).

Deletes and branch switches are written on the chat writer thread; the thread is read again once they
are committed. The reply being written is shown live: its text is newer than the database's.
"""

from __future__ import annotations

from dataclasses import asdict

from PySide6.QtCore import QPoint, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QMenu, QStackedWidget, QVBoxLayout, QWidget

from app.core.chat.attachments import thumbnails
from app.core.chat.context import Turn
from app.core.chat.models import ChatNotFound, Message
from app.core.chat.operations import ChatOperations
from app.core.chat.store import ChatStore
from app.ui.chat.empty_state import EmptyThread
from app.ui.chat.message_view import MessageView
from app.ui.chat.messages_model import MessagesModel, Row
from app.ui.chat.stream import StreamResult
from app.ui.tasks import TaskRunner


def active_branch(everything: list[Message], leaf_id: int | None):
    """The root-to-leaf path ending at `leaf_id`, and each message's (position, count) among its siblings."""
    by_id = {m.id: m for m in everything}
    siblings: dict[int | None, list[int]] = {}
    for m in everything:
        siblings.setdefault(m.parent_id, []).append(m.id)
    path: list[Message] = []
    node = by_id.get(leaf_id) if leaf_id is not None else None
    while node is not None:
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    branches = {m.id: (siblings[m.parent_id].index(m.id) + 1, len(siblings[m.parent_id])) for m in path}
    return path, branches


class ThreadView(QWidget):
    """Signals (UI thread): `changed` when rows are replaced, added or finished (meter, controls);
    `edit_requested(msg_id, text)`, `regenerate_requested`, `stop_requested` (Delete on the reply
    being written) for the reply controller; `notice(text, level)` for the page; `source_requested(msg_id,
    number)` when a citation [N] or a line of a Sources block is clicked."""

    changed = Signal()
    source_requested = Signal(int, int)
    edit_requested = Signal(int, str)
    regenerate_requested = Signal()
    stop_requested = Signal()
    notice = Signal(str, str)

    def __init__(
        self,
        store: ChatStore,
        chats: ChatOperations,
        writes: TaskRunner,
        parent: QWidget | None = None,
        tasks: TaskRunner | None = None,
    ) -> None:
        """`tasks`: the pool the images' thumbnails are made on (None: their tiles stay blank)."""
        super().__init__(parent)
        self.store, self.chats, self.writes, self.tasks = store, chats, writes, tasks
        self.conv_id: int | None = None
        self._live: dict[int, str] = {}  # reply being written -> its text so far
        self.messages = MessagesModel(self)
        self.view = MessageView()
        self.view.setModel(self.messages)
        self.view.anchor_clicked.connect(self.activate)
        self.view.context_requested.connect(self._context_menu)
        self._follow = True  # keep the newest text in view until the user scrolls away
        bar = self.view.verticalScrollBar()
        bar.actionTriggered.connect(lambda _a: QTimer.singleShot(0, self._user_scrolled))
        # Rows laid out with estimated heights grow when first painted: stay pinned to the end.
        bar.rangeChanged.connect(lambda _lo, hi: bar.setValue(hi) if self._follow else None)
        # No messages: a word on what to do instead of a blank pane.
        self.empty = EmptyThread()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.view)
        self.stack.addWidget(self.empty)
        self.changed.connect(self._show_empty_or_thread)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self._show_empty_or_thread()

    @property
    def rows(self) -> list[Row]:
        return self.messages.rows

    @property
    def showing_empty(self) -> bool:
        return self.stack.currentWidget() is self.empty

    def _show_empty_or_thread(self) -> None:
        self.stack.setCurrentWidget(self.view if self.messages.rows else self.empty)

    # -- what is shown --------------------------------------------------------------------------
    def show_conversation(self, conv_id: int | None) -> None:
        self.conv_id = conv_id
        self.reload()
        self.follow_end()

    def reload(self) -> None:
        """Read the shown branch (one query) with each message's position among its siblings."""
        try:
            if self.conv_id is None:
                raise ChatNotFound("no conversation open")
            leaf = self.store.get_conversation(self.conv_id).active_leaf_id
            everything = self.store.all_messages(self.conv_id)
        except ChatNotFound:  # nothing open, or deleted meanwhile
            self.messages.set_messages([])
        else:
            path, branches = active_branch(everything, leaf)
            counts = self.store.image_counts(m.id for m in path if m.role == "user")
            sources = self.store.sources_of(m.id for m in path if m.role == "assistant")
            self.messages.set_messages(path, branches, self._live, counts, sources)
            self._make_thumbnails(list(counts))
        self.changed.emit()

    def _make_thumbnails(self, msg_ids: list[int]) -> None:
        """Read these messages' images and make their thumbnails on the pool; rows show them as they come."""
        missing = [i for i in msg_ids if i not in self.messages.thumbnails]
        if not missing or self.tasks is None:
            return
        store = self.store
        self.tasks.run(lambda: thumbnails(store.images_of(missing)), self._thumbnails_made, owner=self)

    def _thumbnails_made(self, made: dict[int, list[bytes]]) -> None:
        """UI thread."""
        for msg_id, tiles in made.items():
            self.messages.set_thumbnails(msg_id, [QImage.fromData(png) for png in tiles])

    def append_sent(self, conv_id: int, user_id: int, reply_id: int | None) -> bool:
        """Append a new user turn and its reply to the shown thread, if they follow its last row:
        re-reading a 1,000-message thread on every send would cost the UI tens of milliseconds."""
        if conv_id != self.conv_id:
            return False
        user = self.store.get_message(user_id)
        rows = self.messages.rows
        if user.parent_id != (rows[-1].id if rows else None):
            return False
        count = self.store.image_counts([user_id]).get(user_id, 0)
        self.messages.append(user, count)
        if count:
            self._make_thumbnails([user_id])
        if reply_id is not None:
            self.messages.append(self.store.get_message(reply_id))
        self.changed.emit()
        return True

    def turns_to(self, conv_id: int, parent_id: int) -> list[Turn]:
        """The turns up to `parent_id`: from the shown rows when they hold them (a long chat is not
        re-read from disk on every send), else from the store."""
        if conv_id == self.conv_id and (i := self.messages.row_of(parent_id)) is not None:
            return list(self.messages.rows[: i + 1])
        thread = self.store.active_path(conv_id)
        cut = next((i for i, m in enumerate(thread) if m.id == parent_id), len(thread) - 1)
        return list(thread[: cut + 1])

    # -- the reply being written ----------------------------------------------------------------
    def begin_stream(self, msg_id: int) -> None:
        self._live[msg_id] = ""

    def end_streams(self) -> None:
        """The replies shown live are saved: show what the database holds for them from now on."""
        self._live.clear()

    def stream_text(self, msg_id: int, text: str) -> None:
        """UI thread, at most every flush of the stream."""
        self._live[msg_id] = text
        self.messages.update_text(msg_id, text)
        if self._follow:
            self.view.scrollToBottom()

    def show_finished(self, msg_id: int, result: StreamResult) -> None:
        self._live.pop(msg_id, None)
        stats = asdict(result.stats) if result.stats is not None else None
        if result.extra_stats:
            stats = {**(stats or {}), **result.extra_stats}
        self.messages.finish(msg_id, result.status, result.text, stats, result.finish_reason, result.error)
        # Its passages were saved before the model started, after the row was shown: read them now (one query).
        if (given := self.store.sources_of([msg_id]).get(msg_id)) is not None:
            self.messages.set_sources(msg_id, given)
        if self._follow and self.messages.row(msg_id) is not None:
            self.view.scrollToBottom()
        self.changed.emit()

    def follow_end(self) -> None:
        self._follow = True
        self.view.scrollToBottom()

    def _user_scrolled(self) -> None:
        self._follow = self.view.at_bottom()

    # -- message actions ------------------------------------------------------------------------
    def activate(self, msg_id: int, href: str) -> None:
        """A click on a link of a message: its actions, a code block's Copy, the reasoning toggle."""
        row = self.messages.row(msg_id)
        if row is None:
            return
        kind, _, arg = href.partition(":")
        if href.startswith("copy:") and row.rendered is not None and arg.isdigit():
            blocks = row.rendered.code_blocks
            if int(arg) < len(blocks):
                QGuiApplication.clipboard().setText(blocks[int(arg)])
        elif href in ("think:toggle", "tool:toggle"):  # reasoning, or a long tool result: folded or open
            self.messages.toggle_reasoning(msg_id)
        elif kind == "act":
            {"copy": self.copy_message, "edit": self.begin_edit, "delete": self.delete_message}[arg](msg_id)
        elif kind == "branch":
            self.switch_branch(msg_id, -1 if arg == "prev" else 1)
        elif kind in ("cite", "source") and arg.isdigit():
            self.source_requested.emit(msg_id, int(arg))
        else:  # a link in the text: never opened by a click
            QGuiApplication.clipboard().setText(href)
            self.notice.emit(f"Links are not opened from chats. Copied: {href}", "info")

    def _context_menu(self, msg_id: int, pos: QPoint) -> None:
        row = self.messages.row(msg_id)
        if row is None:
            return
        menu = QMenu(self)
        menu.addAction("Copy", lambda: self.copy_message(msg_id))
        if row.message.role == "user":
            menu.addAction("Edit and resend", lambda: self.begin_edit(msg_id))
        if row is self.messages.rows[-1] and row.message.role == "assistant":
            menu.addAction("Regenerate", lambda: self.regenerate_requested.emit())
        menu.addAction("Delete", lambda: self.delete_message(msg_id))
        menu.popup(pos)

    def copy_message(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is not None:
            QGuiApplication.clipboard().setText(row.text)

    def begin_edit(self, msg_id: int) -> None:
        row = self.messages.row(msg_id)
        if row is not None and row.message.role == "user":
            self.edit_requested.emit(msg_id, row.text)

    def delete_message(self, msg_id: int) -> None:
        """Written on the writer thread; the thread is read again once it is committed (or failed)."""
        if msg_id in self._live:
            self.stop_requested.emit()
            return  # deleting a reply mid-stream: stop it; delete the kept part afterwards
        self.writes.watch(
            self.chats.delete_message(msg_id),
            lambda _r: self.reload(),
            lambda exc: self._failed(exc, reload=True),
            owner=self,
        )

    def switch_branch(self, msg_id: int, step: int) -> None:
        """Show the sibling `step` away; the thread is read again once the choice is committed."""
        self.writes.watch(
            self.chats.switch_branch(msg_id, step), lambda _target: self.reload(), self._failed, owner=self
        )

    def _failed(self, exc: BaseException, reload: bool = False) -> None:
        """UI thread: a write of this view failed; its text is for the user (ChatOperations)."""
        self.notice.emit(str(exc), "error")
        if reload:
            self.reload()
