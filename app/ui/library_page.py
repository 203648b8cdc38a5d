"""My Models: the library as a table, with Chat, Reveal, Delete, Import… and imports from the HF cache / LM Studio."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.engines.remote import RemoteStore
from app.core.formats import GGUF, MLX
from app.core.library import ImportResult, Library, LocalModel, import_path
from app.core.library.projectors import sees_images
from app.core.runtime.chat_templates import TemplatePrefs
from app.core.runtime.job_host import JobHost
from app.core.units import fmt_ago, fmt_bytes
from app.ui.bridge import EventBridge
from app.ui.file_dialogs import existing_folder, open_file_name
from app.ui.remotes_panel import RemotesPanel
from app.ui.tasks import TaskRunner
from app.ui.widgets.loaded_models import LoadedModelsStrip

logger = logging.getLogger(__name__)

COLUMNS = ["Name", "Format", "Quant", "Size", "Path", "Last used", "Status"]
EMPTY_TEXT = (
    "My Models lists the models on this computer: the ones you download in Discover and the GGUF files you "
    "import. Pick one here to chat with it, or to serve it on the Server page's API."
)


class EmptyLibrary(QFrame):
    """What My Models shows before it holds a model: what the page is for, and the two ways to fill it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        title = QLabel("No models yet")
        title.setObjectName("cardTitle")
        text = QLabel(EMPTY_TEXT)
        text.setWordWrap(True)
        self.find_button = QPushButton("Find a model")
        self.find_button.setProperty("role", "primary")
        self.import_button = QPushButton("Import a file…")
        buttons = QHBoxLayout()
        buttons.addWidget(self.find_button)
        buttons.addWidget(self.import_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setSpacing(8)
        layout.addWidget(title)
        layout.addWidget(text)
        layout.addLayout(buttons)


def describe_import(result: ImportResult) -> str:
    parts = [f"Imported {len(result.imported)} model{'s' if len(result.imported) != 1 else ''}."]
    if result.skipped:
        reasons = "; ".join(f"{s.path.name}: {s.reason}" for s in result.skipped[:3])
        more = f" (and {len(result.skipped) - 3} more)" if len(result.skipped) > 3 else ""
        parts.append(f"Skipped {len(result.skipped)}: {reasons}{more}.")
    if result.where():  # another app's folders: where "nothing" was looked for
        parts.append(result.where())
    return " ".join(parts)


class LibraryPage(QWidget):
    models_shown = Signal(list)  # list[LocalModel], after every reload (main thread)
    import_finished = Signal(str)  # what happened, in plain words
    chat_requested = Signal(object)  # LocalModel: open it in Chat (main.py wires this to the Chat page)
    discover_requested = Signal()  # "Find a model" on the empty page: show Discover (main.py wires it)

    def __init__(
        self,
        library: Library,
        tasks: TaskRunner,
        *,
        confirm: Callable[[str, str], bool] | None = None,
        open_url: Callable[[QUrl], bool] = QDesktopServices.openUrl,
        remotes: RemoteStore | None = None,
        host: JobHost | None = None,
        templates: TemplatePrefs | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`remotes`: the remote servers, listed below the library (None: no such section); `host`: the
        engine, whose loaded models are listed below the library, with Pin and Eject (None: not listed);
        `templates`: the chat template picked per model ("Chat template…"; None: no such action)."""
        super().__init__(parent)
        self.library = library
        self._tasks = tasks
        self._confirm = confirm or self._ask
        self._open_url = open_url
        self.templates = templates
        self.models: list[LocalModel] = []  # as shown, in the table's order

        title = QLabel("My Models")
        title.setObjectName("pageTitle")
        self.total = QLabel()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # The path takes what is left and elides in the middle (its folder and its file name both show):
        # a full path made the whole table scroll sideways.
        header.setSectionResizeMode(COLUMNS.index("Path"), QHeaderView.ResizeMode.Stretch)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.setWordWrap(False)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        # A few rows always show: the loaded models and the remote servers below take the rest of a small window.
        rows = 3 * self.table.verticalHeader().defaultSectionSize()
        self.table.setMinimumHeight(header.sizeHint().height() + rows + 2 * self.table.frameWidth())
        # Double-clicking a model is the quickest way to talk to it; Reveal and Delete stay deliberate.
        self.table.cellDoubleClicked.connect(lambda row, _col: self._chat_row(row))
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._show_context_menu)

        self.chat_button = QPushButton("Chat")
        self.chat_button.setToolTip("Load this model in Chat (or double-click it)")
        self.chat_button.clicked.connect(self.chat_selected)
        self.reveal_button = QPushButton("Reveal")
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setProperty("role", "destructive")  # the style sheet's destructive button
        self.delete_button.clicked.connect(self.delete_selected)
        self.import_button = QToolButton()
        self.import_button.setText("Import…")
        self.import_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.import_button)
        for entry in self.import_actions():
            if entry is None:
                menu.addSeparator()
            else:
                menu.addAction(*entry)
        self.import_button.setMenu(menu)
        buttons = QHBoxLayout()
        for w in (self.chat_button, self.reveal_button, self.delete_button, self.import_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
        buttons.addWidget(self.total)

        # Instead of an empty table, once the first listing finds nothing.
        self.empty = EmptyLibrary()
        self.empty.find_button.clicked.connect(self.discover_requested.emit)
        self.empty.import_button.clicked.connect(self._import_file)
        self.empty.setVisible(False)

        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.empty)
        layout.addWidget(self.table, 1)
        self.loaded_models: LoadedModelsStrip | None = None
        if host is not None:
            self.loaded_models = LoadedModelsStrip(host)
            layout.addWidget(self.loaded_models)
        self.remotes_panel: RemotesPanel | None = None
        if remotes is not None:
            self.remotes_panel = RemotesPanel(remotes, tasks)
            self.remotes_panel.chat_requested.connect(self.chat_requested.emit)
            layout.addWidget(self.remotes_panel)
        layout.addStretch(0)  # spare height gathers at the bottom while the table (stretch 1) is hidden

        self._select_next: str | None = None  # the id of a model just imported, selected when it is listed
        # Coalesced to one key: a bulk import fires `changed` per model, one reload is enough.
        self._bridge = EventBridge(library.changed, self, coalesce_key=lambda _: None)
        self._bridge.fired.connect(lambda _: self.reload())
        self._selection_changed()
        self.reload()

    # ---- reading ----

    def reload(self) -> None:
        """Re-check files on disk and refill the table (the check runs on the pool)."""
        self._tasks.run(self._read, self._show, self._error, owner=self)

    def _read(self) -> tuple[list[LocalModel], set[str]]:
        """Pool thread: the library, and the ids of its models that see images (read from each projector's
        header once per file version), so two files of one model tell apart by more than their names."""
        models = self.library.refresh()
        return models, {m.id for m in models if m.ready and sees_images(m)}

    def _show(self, read: tuple[list[LocalModel], set[str]]) -> None:
        models, seeing = read
        selected = self.selected()
        just_imported = next((m for m in models if m.id == self._select_next), None)
        if just_imported is not None:  # selected, so Chat, Reveal and Delete work at once
            selected, self._select_next = just_imported, None
        self.models = list(models)
        self.table.setRowCount(len(self.models))
        for row, m in enumerate(self.models):
            status = "Ready" if m.ready else f"{m.status.title()}: {m.reason}" if m.reason else m.status.title()
            cells = [
                m.name + (" · Vision" if m.id in seeing else ""),
                m.format.upper(),
                m.quant or "—",
                fmt_bytes(m.size),
                str(m.path),
                fmt_ago(m.last_used_at, never="never"),
                status,
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 4:
                    item.setToolTip(text)
                self.table.setItem(row, col, item)
            if selected is not None and m.id == selected.id:
                self.table.selectRow(row)
        self.empty.setVisible(not self.models)
        self.table.setVisible(bool(self.models))
        total = sum(m.size for m in self.models)
        self.total.setText(
            f"{len(self.models)} model{'s' if len(self.models) != 1 else ''} · {fmt_bytes(total)} on disk"
        )
        self._selection_changed()
        self.models_shown.emit(self.models)

    def _error(self, exc: BaseException) -> None:
        logger.error("library task failed", exc_info=exc)
        self.status.setText(str(exc))

    def selected(self) -> LocalModel | None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        return self.models[min(rows)] if rows and min(rows) < len(self.models) else None

    def select(self, model_id: str) -> None:
        for row, m in enumerate(self.models):
            if m.id == model_id:
                self.table.selectRow(row)

    def row_text(self, row: int) -> list[str]:
        return [item.text() if (item := self.table.item(row, c)) is not None else "" for c in range(len(COLUMNS))]

    def _selection_changed(self) -> None:
        m = self.selected()
        self.chat_button.setEnabled(m is not None and m.ready)
        self.reveal_button.setEnabled(m is not None)
        self.delete_button.setEnabled(m is not None)

    def context_menu(self, row: int) -> QMenu:
        """The right-click menu for `row` (selected first, so its actions act on it)."""
        self.table.selectRow(row)
        m = self.selected()
        menu = QMenu(self.table)
        chat = menu.addAction("Chat", self.chat_selected)
        chat.setEnabled(m is not None and m.ready)
        menu.addAction("Reveal", self.reveal_selected)
        if self.templates is not None:
            template = menu.addAction("Chat template…", self.edit_template_selected)
            template.setEnabled(m is not None and m.format in (GGUF, MLX))
        menu.addSeparator()
        menu.addAction("Delete…", self.delete_selected)
        return menu

    def _show_context_menu(self, pos: QPoint) -> None:
        row = self.table.rowAt(pos.y())
        if 0 <= row < len(self.models):
            menu = self.context_menu(row)
            menu.aboutToHide.connect(menu.deleteLater)
            menu.popup(self.table.viewport().mapToGlobal(pos))

    # ---- actions ----

    def chat_selected(self) -> None:
        m = self.selected()
        if m is None:
            return
        if not m.ready:
            self.status.setText(f"{m.name} cannot be loaded: {m.reason or m.status}.")
            return
        self.chat_requested.emit(m)

    def _chat_row(self, row: int) -> None:
        if 0 <= row < len(self.models):
            self.table.selectRow(row)
            self.chat_selected()

    def reveal_selected(self) -> None:
        m = self.selected()
        if m is not None:
            folder = m.path if m.path.is_dir() else m.path.parent
            if not self._open_url(QUrl.fromLocalFile(str(folder))):
                # No file manager (a bare desktop, a container): say where it is rather than do nothing.
                self.status.setText(f"No file manager could open the folder; {m.name} is in {folder}")

    def delete_selected(self) -> None:
        m = self.selected()
        if m is None:
            return
        inside = any(f.path.is_relative_to(self.library.models_dir) for f in m.files)
        what = (
            f"Delete {m.name} and its files ({fmt_bytes(m.size)})?"
            if inside
            else f"Remove {m.name} from My Models? Its files stay where they are (it was imported in place)."
        )
        if not self._confirm("Delete model", what):
            return
        library = self.library
        self._tasks.run(lambda: library.delete(m.id), self._deleted, self._error, owner=self)

    def edit_template_selected(self) -> None:
        """The Chat template dialog for the selected model: Auto, a built-in format, or a pasted template."""
        from app.ui.chat_template_dialog import ChatTemplateDialog

        m = self.selected()
        if m is None or self.templates is None:
            return
        dialog = ChatTemplateDialog(m, self.templates, self._tasks, self)
        if dialog.exec() and dialog.saved is not None:
            kind = "Auto" if not dialog.saved else dialog.saved if "{" not in dialog.saved else "a pasted template"
            self.status.setText(f"{m.name} will use {kind} as its chat template from its next load.")

    def _deleted(self, freed: int) -> None:
        self.status.setText(f"Deleted; freed {fmt_bytes(freed)}.")

    def _ask(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def import_actions(self) -> list[tuple[str, Callable[[], None]] | None]:
        """The ways to import, in the Import… button's order (None: a separator); the main window's File →
        Import lists the same."""
        return [
            ("GGUF file…", self._import_file),
            ("Folder…", self._import_folder),
            None,
            ("From the Hugging Face cache", self.import_hf_cache),
            ("From LM Studio", self.import_lmstudio),
            ("From Ollama", self.import_ollama),
        ]

    def _import_file(self) -> None:
        path = open_file_name(self, "Import a GGUF file", Path.home(), "GGUF models (*.gguf)")
        if path:
            self.import_path(path)

    def _import_folder(self) -> None:
        path = existing_folder(self, "Import a folder of models", Path.home())
        if path:
            self.import_path(path)

    def import_path(self, path: str | Path) -> None:
        """Import in place (nothing is copied); validating GGUF headers reads the disk, so it runs on the pool."""
        self.status.setText(f"Importing {path}…")
        library = self.library
        self._run_import(lambda: import_path(library, path))

    def import_hf_cache(self) -> None:
        from app.core.library import import_hf_cache

        self.status.setText("Looking in the Hugging Face cache…")
        library = self.library
        self._run_import(lambda: import_hf_cache(library))

    def import_lmstudio(self) -> None:
        from app.core.library import import_lmstudio

        self.status.setText("Looking in LM Studio's models folders…")
        library = self.library
        self._run_import(lambda: import_lmstudio(library))

    def import_ollama(self) -> None:
        from app.core.library import import_ollama

        self.status.setText("Looking in Ollama's models folder…")
        library = self.library
        self._run_import(lambda: import_ollama(library))

    def _run_import(self, op: Callable[[], ImportResult]) -> None:
        def done(result: ImportResult) -> None:
            text = describe_import(result)
            self.status.setText(text)
            if result.imported:
                self._select_next = result.imported[0].id
                if any(m.id == self._select_next for m in self.models):  # the table already has it
                    self.select(self._select_next)
                    self._select_next = None
            self.import_finished.emit(text)

        def failed(exc: BaseException) -> None:
            self.status.setText(f"Nothing imported: {exc}")
            self.import_finished.emit(self.status.text())

        self._tasks.run(op, done, failed, owner=self)
