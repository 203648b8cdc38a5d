"""A collection's files as a table: each file's state in words (indexed with its pages and passages, skipped
and why, failed and the reason), filtered by state, with the counts the filter shows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from app.core.documents.store import FAILED, INDEXED, INDEXING, PENDING, SKIPPED, FileRow
from app.core.units import fmt_bytes
from app.ui.theme import theme_colour

COLUMNS = ("File", "State", "Pages", "Passages", "Size")
STATE_WORDS = {PENDING: "Waiting", INDEXING: "Indexing", INDEXED: "Indexed", SKIPPED: "Skipped", FAILED: "Failed"}
# The filter's choices, in the order they are offered: waiting covers the files read now and those queued.
FILTERS = (("all", "All"), ("indexed", "Indexed"), ("waiting", "Waiting"), ("skipped", "Skipped"), ("failed", "Failed"))
_STATE_COLOUR = {FAILED: "error", SKIPPED: "text_muted"}  # palette tokens

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()  # the table's parent: a table has no children


def filter_of(row: FileRow) -> str:
    """Which filter a file belongs to."""
    return "waiting" if row.state in (PENDING, INDEXING) else row.state


def counts(rows: list[FileRow]) -> dict[str, int]:
    """Files per filter, "all" included."""
    found = Counter(filter_of(r) for r in rows)
    return {"all": len(rows), **{key: found.get(key, 0) for key, _ in FILTERS[1:]}}


def state_text(row: FileRow) -> str:
    """What the State cell says: the outcome, and the reason for a skip or a failure (a note for the rest)."""
    words = STATE_WORDS.get(row.state, row.state.title())
    if row.state == INDEXING and row.total:
        words = f"Indexing {row.passages} of {row.total}"
    if row.reason:
        return f"{words}: {row.reason}"
    return words


def passages_text(row: FileRow) -> str:
    if row.state in (INDEXED, INDEXING) or row.passages:
        return str(row.passages)
    return ""


class FileTableModel(QAbstractTableModel):
    """Main thread: the files of the collection shown, as the page last read them (on the pool)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.all_rows: list[FileRow] = []
        self.rows: list[FileRow] = []
        self.shown = "all"
        self.folders: list[Path] = []  # the collection's added folders: a file shows its path inside its folder

    def set_rows(self, rows: list[FileRow], sources: list[Path] | None = None) -> None:
        self.beginResetModel()
        if sources is not None:
            self.folders = sorted((s for s in sources if s not in {r.path for r in rows}), key=lambda s: -len(s.parts))
        self.all_rows = list(rows)
        self.rows = [r for r in self.all_rows if self.shown == "all" or filter_of(r) == self.shown]
        self.endResetModel()

    def set_filter(self, key: str) -> None:
        self.shown = key
        self.set_rows(self.all_rows)

    def row_at(self, row: int) -> FileRow | None:
        return self.rows[row] if 0 <= row < len(self.rows) else None

    def rowCount(self, parent: Index = _ROOT) -> int:  # noqa: N802 (Qt API)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = _ROOT) -> int:  # noqa: N802 (Qt API)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        row = self.row_at(index.row())
        if row is None:
            return None
        column = COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return self.name(row) if column == "File" else _cell(row, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == "File":
                return str(row.path)
            if column == "State":
                return state_text(row)
        if role == Qt.ItemDataRole.ForegroundRole and column == "State" and row.state in _STATE_COLOUR:
            return theme_colour(_STATE_COLOUR[row.state])
        if role == Qt.ItemDataRole.TextAlignmentRole and column in ("Pages", "Passages", "Size"):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def name(self, row: FileRow) -> str:
        """The file's path inside the added folder it was found in ("archive/2025.md"), else its name."""
        folder = next((f for f in self.folders if f in row.path.parents), None)
        return str(row.path.relative_to(folder)) if folder is not None else row.path.name


def _cell(row: FileRow, column: str) -> str:
    if column == "State":
        return state_text(row)
    if column == "Pages":
        return str(row.pages) if row.pages else ""
    if column == "Passages":
        return passages_text(row)
    if column == "Size":
        return fmt_bytes(row.size) if row.size else ""
    return ""
