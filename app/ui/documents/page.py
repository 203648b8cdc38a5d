"""The Documents page: the user's collections, their files and states, indexing's progress, and, before there
is an embedding model, the one to download for this machine.

A thin view over `Documents` (app/core/documents/service.py): every call to it (SQLite, a model file's header)
runs on the pool through the TaskRunner and answers here on the main thread; its `changed` and
`status_changed` events arrive on other threads and come here through EventBridges. Files and folders are
added with the buttons or by dropping them on the page."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.documents.embedding import models_for
from app.core.documents.recommend import Suggestion, recommend, why_not_reranker
from app.core.documents.service import Documents, IndexStatus
from app.core.documents.store import Collection, DocumentsError, FileRow
from app.core.library import Library, LocalModel
from app.core.models.devices import Machine
from app.core.models.recommend import Variant
from app.core.settings import Settings
from app.ui.bridge import EventBridge
from app.ui.documents.collection_view import DROP_HINT, CollectionView
from app.ui.documents.dialogs import Dialogs, ModelChoices
from app.ui.documents.progress_strip import ProgressStrip
from app.ui.documents.suggestions import SuggestionsCard
from app.ui.download_button import DownloadFeed
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status
from app.ui.widgets.message_label import MessageLabel, as_sentences

logger = logging.getLogger(__name__)

EMPTY_TITLE = "No collections yet"
EMPTY_TEXT = (
    "A collection is a set of files and folders Hearth reads and indexes on this computer, so a chat can "
    "answer from them. Make one, then add files to it or drop them here."
)
RECOMMENDED_TITLE = "Recommended for this machine"
MACHINE_RETRY_MS = 2000  # while the hardware probe has not answered, look again this often (page shown only)


@dataclass(frozen=True)
class Snapshot:
    """What the page shows, read on the pool in one go."""

    collections: list[Collection]
    selected: str | None
    files: list[FileRow]
    sources: list[Path]  # the files and folders the user added to `selected`


class EmptyCollections(QFrame):
    """Before the first collection: what collections are, and the button that makes one."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        title = QLabel(EMPTY_TITLE)
        title.setObjectName("cardTitle")
        self.text = MessageLabel(EMPTY_TEXT)
        self.create_button = QPushButton("Make a collection")
        self.create_button.setProperty("role", "primary")
        buttons = QHBoxLayout()
        buttons.addWidget(self.create_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setSpacing(8)
        layout.addWidget(title)
        layout.addWidget(self.text)
        layout.addLayout(buttons)


class DocumentsPage(QWidget):
    snapshot_shown = Signal()  # after each refill from the store (main thread): tests and screenshots wait on it

    def __init__(
        self,
        documents: Documents,
        library: Library,
        tasks: TaskRunner,
        *,
        role_of: Callable[[LocalModel], str],
        machine: Callable[[], Machine | None],
        settings: Callable[[], Settings],
        save_settings: Callable[[Settings], None],
        feed: DownloadFeed | None = None,
        request_download: Callable[[Variant], None] | None = None,
        dialogs: Dialogs | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`role_of` reads a library model's role (ModelResolver.role: its file's header, so on the pool);
        `machine()` is the latest hardware probe's machine (None until it answers); `feed` and
        `request_download` are the Downloads page's: a suggestion's Download goes through its queue."""
        super().__init__(parent)
        self.documents = documents
        self.library = library
        self._tasks = tasks
        self._role_of = role_of
        self._machine = machine
        self._settings = settings
        self._save_settings = save_settings
        self.dialogs = dialogs or Dialogs(self)
        if feed is not None and feed.parent() is None:
            feed.setParent(self)  # the page's own feed lives as long as the page
        self.collections: list[Collection] = []
        self.sources: list[Path] = []  # of the collection shown
        self.selected: str | None = None  # the collection shown (its name)
        self.model_choices = ModelChoices()
        self.models_loaded = False
        self.loaded = False  # the first snapshot is in
        self._pending_paths: list[Path] = []  # dropped before a collection was made for them
        self.setAcceptDrops(True)

        title = QLabel("Documents")
        title.setObjectName("pageTitle")
        self.new_button = QPushButton("New collection…")
        self.new_button.clicked.connect(lambda: self.new_collection())
        head = QHBoxLayout()
        head.addWidget(title)
        head.addStretch(1)
        head.addWidget(self.new_button)
        self.status = MessageLabel()
        self.status.setVisible(False)
        self.progress = ProgressStrip()
        self.progress.pause_clicked.connect(self.pause)
        self.progress.resume_clicked.connect(self.resume)
        self.suggestions = SuggestionsCard(feed, request_download, self._reranker_in_use)
        self.suggestions.use_requested.connect(self._use_suggestion)
        self.suggestions.setVisible(False)
        self.empty = EmptyCollections()
        self.empty.create_button.clicked.connect(lambda: self.new_collection())
        self.empty.setVisible(False)

        self.list = QListWidget()
        self.list.setMinimumWidth(150)
        self.list.currentItemChanged.connect(self._list_changed)
        self.view = CollectionView()
        self.view.add_files_clicked.connect(self._add_files)
        self.view.add_folder_clicked.connect(self._add_folder)
        self.view.retry_clicked.connect(self.retry_failed)
        self.view.remove_requested.connect(self.remove_files)
        self.view.rename_clicked.connect(self.rename)
        self.view.delete_clicked.connect(self.delete)
        self.view.change_model_clicked.connect(self.change_model)
        self.split = QSplitter()
        self.split.addWidget(self.list)
        self.split.addWidget(self.view)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([200, 700])
        self.split.setChildrenCollapsible(False)
        self.split.setVisible(False)
        self.drop_hint = QLabel(DROP_HINT)
        self.drop_hint.setWordWrap(True)
        set_status(self.drop_hint, "muted")
        self.drop_hint.setVisible(False)

        layout = QVBoxLayout(self)
        layout.addLayout(head)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(self.empty)
        layout.addWidget(self.suggestions)
        layout.addWidget(self.drop_hint)
        layout.addWidget(self.split, 1)
        layout.addStretch(0)  # spare height gathers at the bottom while the split (stretch 1) is hidden

        # Coalesced: indexing fires `changed` per file and `status_changed` per batch; the latest is enough.
        self._changed = EventBridge(documents.changed, self, coalesce_key=lambda _: None, max_rate_hz=4)
        self._changed.fired.connect(lambda _: self.reload())
        self._status = EventBridge(documents.status_changed, self, coalesce_key=lambda _: None)
        self._status.fired.connect(self._show_status)
        self._library = EventBridge(library.changed, self, coalesce_key=lambda _: None)
        self._library.fired.connect(lambda _: self.reload_models())
        self._machine_timer = QTimer(self)
        self._machine_timer.setSingleShot(True)
        self._machine_timer.timeout.connect(self._update_suggestions)
        self._show_status(documents.status)
        self.reload()
        self.reload_models()

    # ---- reading (the pool answers on the main thread) ----

    def reload(self) -> None:
        """Read the collections and the shown one's files on the pool, then refill."""
        documents, selected = self.documents, self.selected
        self._tasks.run(lambda: _snapshot(documents, selected), self._show_snapshot, self._failed, owner=self)

    def reload_models(self) -> None:
        """The library's embedding models and rerankers (their roles come from their files: on the pool)."""
        library, role_of = self.library, self._role_of

        def read() -> ModelChoices:
            embedding = [m.name for m in models_for(library, role_of, "embedding")]
            return ModelChoices(embedding, [m.name for m in models_for(library, role_of, "rerank")])

        self._tasks.run(read, self._show_models, self._failed, owner=self)

    def _show_snapshot(self, snap: Snapshot) -> None:
        self.collections = snap.collections
        names = [c.name for c in snap.collections]
        if self.selected not in names:  # deleted, renamed, or the first listing: show the first
            self.selected = names[0] if names else None
            if self.selected is not None and snap.selected != self.selected:
                self.reload()  # its files were not read with this snapshot
        self.list.blockSignals(True)
        self.list.clear()
        for c in snap.collections:
            item = QListWidgetItem(f"{c.name} ({c.files})")
            item.setData(Qt.ItemDataRole.UserRole, c.name)
            item.setToolTip(f"{c.files} files · {c.passages} passages · embedded by {c.model}")
            self.list.addItem(item)
            if c.name == self.selected:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        shown = next((c for c in snap.collections if c.name == self.selected), None)
        if shown is not None and snap.selected == shown.name:
            self.view.show_collection(shown, snap.files, snap.sources)
            self.sources = snap.sources
        self.loaded = True
        self._update_visibility()
        self.snapshot_shown.emit()

    def _show_models(self, choices: ModelChoices) -> None:
        self.model_choices = choices
        self.models_loaded = True
        self._update_visibility()

    def _list_changed(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        name = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if name != self.selected:
            self.selected = name
            self.reload()

    def select(self, name: str) -> None:
        """Show the collection `name` (main thread)."""
        self.selected = name
        self.reload()

    def _update_visibility(self) -> None:
        has_collections = bool(self.collections)
        has_model = bool(self.model_choices.embedding)
        self.split.setVisible(has_collections)
        self.empty.setVisible(self.loaded and self.models_loaded and not has_collections and has_model)
        self.drop_hint.setVisible(self.empty.isVisibleTo(self))
        # Before the first collection, Hearth says what fits this machine (the one way in without a model).
        show = self.loaded and self.models_loaded and (not has_model or not has_collections)
        self.suggestions.setVisible(show)
        self.suggestions.title.setText("Documents need an embedding model" if not has_model else RECOMMENDED_TITLE)
        self.new_button.setEnabled(has_model)
        self.new_button.setToolTip("" if has_model else "Download an embedding model first (below)")
        if show:
            self._update_suggestions()

    def _update_suggestions(self) -> None:
        """The picks for this machine; while the hardware probe has not answered, look again shortly."""
        machine = self._machine()
        if machine is None:
            if self.isVisible():
                self._machine_timer.start(MACHINE_RETRY_MS)
            return
        self.suggestions.set_suggestions(recommend(machine), why_not_reranker(machine))
        self.suggestions.refresh()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt API)
        super().showEvent(event)
        if self.suggestions.isVisibleTo(self) and self.suggestions.suggestions is None:
            self._update_suggestions()

    def _show_status(self, status: IndexStatus) -> None:
        self.progress.show_status(status)

    # ---- what the user asks ----

    def _say(self, text: str, status: str | None = None) -> None:
        self.status.setText(text)
        set_status(self.status, status)  # type: ignore[arg-type]
        self.status.setVisible(bool(text))

    def _failed(self, exc: BaseException) -> None:
        if not isinstance(exc, (DocumentsError, OSError)):
            logger.error("a documents task failed", exc_info=exc)
        self._say(as_sentences(str(exc)) or "That did not work.", "error")

    def _run(self, op: Callable[[], object], done: Callable[[object], None] | None = None) -> None:
        """`op` on the pool (it calls Documents); `done` with its result on the main thread."""
        self._tasks.run(op, done, self._failed, owner=self)

    def _default_model(self) -> str:
        chosen = self._settings().documents.embedding_model
        choices = self.model_choices.embedding
        return chosen if chosen in choices else choices[0] if choices else ""

    def new_collection(self, name: str = "", model: str = "", paths: Sequence[Path] = ()) -> None:
        """Ask a name and model, make the collection, and add `paths` to it (a drop before any collection)."""
        models = list(self.model_choices.embedding)
        if model and model not in models:
            models.insert(0, model)  # just downloaded: the library listing may not have it yet
        if not models:
            self._say("Download an embedding model first: Hearth recommends one for this machine below.", "warning")
            return
        answer = self.dialogs.new_collection(name, models, model or self._default_model())
        if answer is None:
            return
        name, model = answer
        documents, paths = self.documents, list(paths)

        def op() -> Collection:
            collection = documents.create(name, model)
            if paths:
                documents.add(collection.name, paths)
            return collection

        def done(collection: object) -> None:
            assert isinstance(collection, Collection)
            self._say(f"Made {collection.name}." + (" Indexing what was added…" if paths else " Add files to it."))
            self._pending_paths = []
            self.select(collection.name)

        self._run(op, done)

    def add_paths(self, paths: Sequence[Path]) -> None:
        """Add files or folders to the collection shown (or to a new one, asked for, when there is none)."""
        paths = [Path(p) for p in paths]
        if not paths:
            return
        if self.selected is None:
            guess = paths[0].name if paths[0].is_dir() else paths[0].stem
            self.new_collection(guess, paths=paths)
            return
        documents, name = self.documents, self.selected
        what = paths[0].name if len(paths) == 1 else f"{len(paths)} items"
        self._run(lambda: documents.add(name, paths), lambda _c: self._say(f"Added {what} to {name}; indexing…"))

    def _add_files(self) -> None:
        self.add_paths(self.dialogs.files())

    def _add_folder(self) -> None:
        folder = self.dialogs.folder()
        if folder is not None:
            self.add_paths([folder])

    def remove_files(self, paths: list[Path]) -> None:
        name = self.selected
        if name is None or not paths:
            return
        what = paths[0].name if len(paths) == 1 else f"{len(paths)} files"
        text = f"Remove {what} from {name}? The files stay on disk; their passages are forgotten."
        watched = [s for s in self.sources if s not in paths and any(s in p.parents for p in paths)]
        if watched:
            # The folder is looked at again (on start, every half minute): the file is kept out of it from now on.
            text += (
                f"\n\n{'It is' if len(paths) == 1 else 'Some are'} in {watched[0]}, a folder {name} watches: "
                "Hearth leaves it out from now on. Add the file again to bring it back."
            )
        if not self.dialogs.confirm("Remove from collection", text):
            return
        documents = self.documents
        self._run(lambda: documents.remove(name, paths), lambda n: self._say(f"Removed {n} from {name}."))

    def retry_failed(self) -> None:
        name = self.selected
        if name is None:
            return
        documents = self.documents
        self._run(lambda: documents.retry_failed(name), lambda n: self._say(f"Reading {n} failed file(s) again."))

    def rename(self) -> None:
        name = self.selected
        if name is None:
            return
        new = self.dialogs.text("Rename collection", "New name", name)
        if new is None or new == name:
            return
        documents = self.documents

        def done(collection: object) -> None:
            assert isinstance(collection, Collection)
            self._say(f"Renamed {name} to {collection.name}.")
            self.select(collection.name)

        self._run(lambda: documents.rename(name, new), done)

    def delete(self) -> None:
        name = self.selected
        if name is None:
            return
        text = f"Delete the collection {name} and its index? The files themselves stay on disk."
        if not self.dialogs.confirm("Delete collection", text):
            return
        documents = self.documents

        def done(_: object) -> None:
            self._say(f"Deleted {name}.")
            if self.selected == name:
                self.selected = None
            self.reload()

        self._run(lambda: documents.delete(name), done)

    def change_model(self) -> None:
        c = next((c for c in self.collections if c.name == self.selected), None)
        if c is None:
            return
        model = self.dialogs.choose_model(c.name, c.model, list(self.model_choices.embedding))
        if model is None or model == c.model:
            return
        documents = self.documents
        done = lambda _c: self._say(f"{c.name} is embedded by {model} now; every file is read again.")  # noqa: E731
        self._run(lambda: documents.set_model(c.name, model), done)

    def pause(self) -> None:
        self._run(self.documents.pause)

    def resume(self) -> None:
        self._run(self.documents.resume)

    # ---- suggestions ----

    def _reranker_in_use(self, model: LocalModel) -> bool:
        return self._settings().documents.reranker == model.name

    def _use_suggestion(self, suggestion: Suggestion, model: LocalModel) -> None:
        """Main thread: a downloaded suggestion put to use."""
        if suggestion.role == "embedding":
            self.new_collection(model=model.name, paths=self._pending_paths)
            return
        settings = self._settings()
        documents = settings.documents.model_copy(update={"reranker": model.name})
        self._save_settings(settings.model_copy(update={"documents": documents}))
        self._say(f"Searches are reranked by {model.name} (Settings → Documents).")
        self.suggestions.refresh()

    # ---- drag and drop ----

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt API)
        if _local_paths(event.mimeData().urls() if event.mimeData().hasUrls() else []):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt API)
        paths = _local_paths(event.mimeData().urls() if event.mimeData().hasUrls() else [])
        if not paths:
            return
        event.acceptProposedAction()
        if not self.model_choices.embedding and not self.collections:
            self._pending_paths = paths  # added to the collection made once a model is downloaded
            self._say("Download an embedding model first (below); what you dropped is added to its collection.")
            return
        self.add_paths(paths)


def _snapshot(documents: Documents, selected: str | None) -> Snapshot:
    """Pool thread: the collections, and the files of `selected` (else the first collection's)."""
    collections = documents.collections()
    names = [c.name for c in collections]
    shown = selected if selected in names else names[0] if names else None
    files = documents.files(shown) if shown is not None else []
    sources = documents.store.sources(documents.collection(shown).id) if shown is not None else []
    return Snapshot(collections, shown, files, sources)


def _local_paths(urls) -> list[Path]:
    return [Path(u.toLocalFile()) for u in urls if u.isLocalFile() and u.toLocalFile()]
