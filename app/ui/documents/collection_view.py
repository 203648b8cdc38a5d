"""One collection: its embedding model and size on disk, its files with their states, and what can be done to
it. A view only: its buttons ask (signals), the Documents page calls the core on the pool."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QStyledItemDelegate,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.documents.store import Collection, FileRow
from app.core.units import fmt_bytes
from app.ui.documents.file_table import COLUMNS, FILTERS, FileTableModel, counts
from app.ui.theme import set_status
from app.ui.widgets.elided_label import ElidedLabel

DROP_HINT = "Drop files or folders here to add them. Folders are watched: files saved in them later are added too."


def summary(c: Collection) -> str:
    """The line under a collection's name: its model, files, passages and size on disk."""
    files = f"{c.files} file{'s' if c.files != 1 else ''}"
    passages = f"{c.passages} passage{'s' if c.passages != 1 else ''}"
    return f"Embedded by {c.model} · {files} · {passages} · {fmt_bytes(c.bytes)} on disk"


class CollectionView(QWidget):
    """Main thread. `show_collection` fills it; its signals carry what the user asked for."""

    add_files_clicked = Signal()
    add_folder_clicked = Signal()
    retry_clicked = Signal()
    remove_requested = Signal(list)  # list[Path]: the files selected
    rename_clicked = Signal()
    delete_clicked = Signal()
    change_model_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.collection: Collection | None = None
        self.name = QLabel()
        self.name.setObjectName("cardTitle")
        self.details = ElidedLabel()
        set_status(self.details, "muted")
        self.add_files_button = QPushButton("Add files…")
        self.add_files_button.clicked.connect(self.add_files_clicked.emit)
        self.add_folder_button = QPushButton("Add folder…")
        self.add_folder_button.clicked.connect(self.add_folder_clicked.emit)
        self.retry_button = QPushButton("Retry failed")
        self.retry_button.setToolTip("Read the files that failed again (after fixing them, or another try)")
        self.retry_button.clicked.connect(self.retry_clicked.emit)
        self.more_button = QToolButton()
        self.more_button.setText("Collection")
        self.more_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.more_button)
        menu.addAction("Rename…", self.rename_clicked.emit)
        menu.addAction("Change embedding model…", self.change_model_clicked.emit)
        menu.addSeparator()
        menu.addAction("Delete collection…", self.delete_clicked.emit)
        self.more_button.setMenu(menu)
        actions = QHBoxLayout()
        for w in (self.add_files_button, self.add_folder_button, self.retry_button):
            actions.addWidget(w)
        actions.addStretch(1)
        actions.addWidget(self.more_button)

        self.filter = QComboBox()
        self.filter.currentIndexChanged.connect(self._filter_changed)
        self.remove_button = QPushButton("Remove from collection")
        self.remove_button.setToolTip("Forget the selected files and their passages (the files stay on disk)")
        self.remove_button.clicked.connect(self._remove_selected)
        filters = QHBoxLayout()
        filters.addWidget(QLabel("Show"))
        filters.addWidget(self.filter)
        filters.addStretch(1)
        filters.addWidget(self.remove_button)

        self.model = FileTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # The name and the state (with a failure's reason) share the room left: the table never scrolls
        # sideways; a path elides in the middle (its file name stays), a reason at its end (its start says
        # what went wrong); the whole path and reason are their tooltips.
        header.setSectionResizeMode(COLUMNS.index("State"), QHeaderView.ResizeMode.Stretch)
        self._reasons = _ElideRight(self.table)
        self.table.setItemDelegateForColumn(COLUMNS.index("State"), self._reasons)
        header.setSectionResizeMode(COLUMNS.index("File"), QHeaderView.ResizeMode.Stretch)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._context_menu)
        self.hint = QLabel(DROP_HINT)
        self.hint.setWordWrap(True)
        set_status(self.hint, "muted")

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.name)
        layout.addWidget(self.details)
        layout.addLayout(actions)
        layout.addLayout(filters)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.hint)
        self._fill_filter({})
        self._selection_changed()

    def show_collection(self, collection: Collection, files: list[FileRow], sources: list[Path] | None = None) -> None:
        """Main thread: the collection and its files as last read (the selection is kept by path)."""
        selected = set(self.selected_paths()) if self.collection and self.collection.id == collection.id else set()
        self.collection = collection
        self.name.setText(collection.name)
        self.details.setText(summary(collection))
        self.model.set_rows(files, sources)
        self._fill_filter(counts(files))
        self.retry_button.setEnabled(any(f.state == "failed" for f in files))
        for row, f in enumerate(self.model.rows):
            if f.path in selected:
                self.table.selectRow(row)
        self._selection_changed()

    def _fill_filter(self, numbers: dict[str, int]) -> None:
        current = self.filter.currentData() or "all"
        self.filter.blockSignals(True)
        self.filter.clear()
        for key, label in FILTERS:
            self.filter.addItem(f"{label} ({numbers.get(key, 0)})", key)
        self.filter.setCurrentIndex(max(0, self.filter.findData(current)))
        self.filter.blockSignals(False)

    def _filter_changed(self) -> None:
        self.model.set_filter(self.filter.currentData() or "all")
        self._selection_changed()

    def show_filter(self, key: str) -> None:
        self.filter.setCurrentIndex(self.filter.findData(key))

    def selected_paths(self) -> list[Path]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [r.path for r in (self.model.row_at(i) for i in rows) if r is not None]

    def _selection_changed(self) -> None:
        self.remove_button.setEnabled(bool(self.selected_paths()))

    def _remove_selected(self) -> None:
        paths = self.selected_paths()
        if paths:
            self.remove_requested.emit(paths)

    def _context_menu(self, pos: QPoint) -> None:
        row = self.table.rowAt(pos.y())
        if row < 0:
            return
        if row not in {i.row() for i in self.table.selectionModel().selectedRows()}:
            self.table.selectRow(row)
        menu = QMenu(self.table)
        menu.addAction("Remove from collection…", self._remove_selected)
        menu.aboutToHide.connect(menu.deleteLater)
        menu.popup(self.table.viewport().mapToGlobal(pos))


class _ElideRight(QStyledItemDelegate):
    """A column whose text is cut at its end when it does not fit."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 (Qt API)
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideRight
