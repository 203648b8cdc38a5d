"""Documents in the chat: the header's Documents menu (which collections the open conversation searches, and
attaching a file to the next message), the files being read for the composer, and what a reply is grounded in.

Reading an attached file and every search run off the window's thread: a file on the task pool (PDF and office
files in a child process, app.core.chat.retrieval.read_document), a search on this object's one worker thread
("chat-documents"), where the reply's turn prepares its request before the model starts (ChatTurn's prepare).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMenu, QToolButton

from app.core.chat.models import Conversation
from app.core.chat.operations import ChatOperations
from app.core.chat.retrieval import (
    MAX_ATTACHED_DOCUMENTS,
    AttachedDocument,
    DocumentSearch,
    TurnDocuments,
    read_document,
)
from app.core.documents.parsing import SUPPORTED_SUFFIXES
from app.core.documents.store import DocumentsError
from app.core.units import fmt_n
from app.ui.chat.composer import ComposerBox
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)

EMPTY_LINE = "No collections yet. Add documents on the Documents page"
ATTACH = "Attach a file to the next message…"
FILTER = "Documents (" + " ".join(f"*{s}" for s in sorted(SUPPORTED_SUFFIXES)) + ")"


class ChatDocuments(QObject):
    """Signals (UI thread): `changed(conv)` once a conversation's collections are saved; `notice(text, level)`."""

    changed = Signal(object)
    notice = Signal(str, str)
    _renamed = Signal(str, str)  # emitted on the renaming thread, delivered on the UI thread (queued)

    def __init__(
        self,
        documents: DocumentSearch | None,
        chats: ChatOperations,
        writes: TaskRunner,
        tasks: TaskRunner,
        button: QToolButton,
        composer: ComposerBox,
        conversation: Callable[[], Conversation | None],
        parent: QObject | None = None,
    ) -> None:
        """`documents` None: no collections here (attaching a file still works); `conversation()`: the open one;
        `tasks`: the pool attached files are read on."""
        super().__init__(parent)
        self.documents, self.chats, self.writes, self.tasks = documents, chats, writes, tasks
        self.button, self.composer, self.conversation = button, composer, conversation
        self.pending = 0  # files being read
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chat-documents")  # one reply streams at a time
        self.menu = QMenu(button)
        self.menu.aboutToShow.connect(self._fill)
        button.setMenu(self.menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        composer.editor.documents_given.connect(self.attach_files)
        self._renamed.connect(self._follow_rename)
        self._unsubscribe: Callable[[], None] = lambda: None
        if documents is not None:
            self._unsubscribe = documents.renamed.connect(lambda names: self._renamed.emit(*names))
        self.refresh()

    @property
    def pool(self) -> ThreadPoolExecutor:
        """Where a grounded reply searches before its model starts."""
        return self._pool

    # -- the menu --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """The button for the open conversation: how many collections it searches."""
        conv = self.conversation()
        n = len(conv.doc_collections) if conv is not None else 0
        self.button.setText(f"Documents ({n})" if n else "Documents")
        self.button.setToolTip("Document collections this chat answers from, and files attached to a message")

    def _fill(self) -> None:
        """UI thread, as the menu opens: the collections as they are now (one small read of the documents
        database; the search itself never runs here)."""
        self.menu.clear()
        conv = self.conversation()
        collections = []
        if self.documents is not None:
            try:
                collections = self.documents.collections()
            except DocumentsError as exc:
                self.notice.emit(f"The documents could not be read: {exc}", "error")
        if not collections:
            self.menu.addAction(EMPTY_LINE).setEnabled(False)
        for c in collections:
            action = self.menu.addAction(f"{c.name} — {fmt_n(c.files, 'file')}")
            action.setCheckable(True)
            action.setChecked(conv is not None and c.name in conv.doc_collections)
            action.setEnabled(conv is not None)
            action.setToolTip(f"{fmt_n(c.passages, 'passage')}, embedded with {c.model}")
            action.toggled.connect(lambda on, name=c.name: self.toggle(name, on))
        if conv is None and collections:
            self.menu.addAction("Open or start a chat to turn collections on").setEnabled(False)
        self.menu.addSeparator()
        self.menu.addAction(ATTACH, self.choose_files)

    def toggle(self, name: str, on: bool) -> None:
        """Turn collection `name` on or off for the open conversation (written on the writer thread)."""
        conv = self.conversation()
        if conv is None:
            return
        names = [n for n in conv.doc_collections if n != name] + ([name] if on else [])
        self.writes.watch(
            self.chats.set_doc_collections(conv.id, names),
            self._saved,
            lambda exc: self.notice.emit(str(exc), "error"),
            owner=self,
        )

    def _follow_rename(self, old: str, new: str) -> None:
        """UI thread: a collection was renamed; the conversations that search it follow the new name."""
        conv = self.conversation()

        def done(ids: list[int]) -> None:
            if conv is not None and conv.id in ids:
                self._saved(self.chats.get_conversation(conv.id))  # one row, read after the write

        self.writes.watch(self.chats.rename_doc_collection(old, new), done, owner=self)

    def _saved(self, conv: Conversation) -> None:
        self.changed.emit(conv)
        self.refresh()

    # -- files attached to the next message --------------------------------------------------------
    def choose_files(self) -> None:
        names, _filter = QFileDialog.getOpenFileNames(self.composer, "Attach documents", str(Path.home()), FILTER)
        self.attach_files([Path(n) for n in names])

    def attach_files(self, paths: Sequence[Path]) -> None:
        """Read each file on the pool; the composer shows it once read, or the notice says why not."""
        room = MAX_ATTACHED_DOCUMENTS - len(self.composer.documents.documents) - self.pending
        paths = list(paths)
        if len(paths) > room:
            self.notice.emit(
                f"A message takes {MAX_ATTACHED_DOCUMENTS} files at most; {len(paths) - max(room, 0)} left out.",
                "error",
            )
        for path in paths[: max(0, room)]:
            self.pending += 1
            self.tasks.run(functools.partial(read_document, path), self._read, self._refused, owner=self.composer)

    def _read(self, document: AttachedDocument) -> None:
        """UI thread."""
        self.pending -= 1
        self.composer.documents.add(document)

    def _refused(self, exc: BaseException) -> None:
        """UI thread: the file cannot be read."""
        self.pending -= 1
        logger.info("document not attached: %s", exc)
        self.notice.emit(f"Not attached: {exc}", "error")

    # -- replies ---------------------------------------------------------------------------------
    @staticmethod
    def for_turn(conv: Conversation, attached: Sequence[AttachedDocument] = ()) -> TurnDocuments:
        """What a reply in `conv` is grounded in: its collections and the files attached to its message."""
        return TurnDocuments(tuple(conv.doc_collections), tuple(attached))

    def shutdown(self) -> None:
        """The reply controller has stopped the reply (its search sees the stop)."""
        self._unsubscribe()
        self._pool.shutdown(wait=False, cancel_futures=True)
