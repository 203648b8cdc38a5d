"""The Server page's live request log: newest first, the last N rows, fed in batches so a burst of
requests costs the UI thread a few model updates, not one per request."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.ui.bridge import EventBridge
from app.ui.server_api import RequestLogLike, RequestRecord
from app.ui.server_model import fmt_clock, fmt_duration
from app.ui.theme import theme_colour

logger = logging.getLogger(__name__)

COLUMNS = ["Time", "Method", "Path", "Model", "Prompt", "Completion", "Cached", "Drafts kept", "Duration", "Status"]
NUMERIC = {4, 5, 6, 7, 8, 9}
DEFAULT_ROWS = 200
MAX_UPDATES_HZ = 8.0


def cells(r: RequestRecord) -> list[str]:
    return [
        fmt_clock(r.at),
        r.method,
        r.path,
        r.model or "—",
        str(r.prompt_tokens) if r.prompt_tokens else "",
        str(r.completion_tokens) if r.completion_tokens else "",
        str(r.cached_tokens) if r.cached_tokens else "",
        f"{r.draft_accepted / r.draft_tokens:.0%} of {r.draft_tokens}" if r.draft_tokens else "",
        fmt_duration(r.duration_s),
        str(r.status),
    ]


class RequestLogModel(QAbstractTableModel):
    """Rows newest first, at most `keep` of them."""

    def __init__(self, keep: int = DEFAULT_ROWS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.keep = keep
        self._rows: list[RequestRecord] = []
        self._cells: list[list[str]] = []  # formatted once: data() is called far more often than rows arrive

    def add(self, items: Sequence[RequestRecord]) -> None:
        """Main thread: `items` oldest first, as they arrived."""
        new = list(reversed(items))[: self.keep]
        if not new:
            return
        self.beginInsertRows(QModelIndex(), 0, len(new) - 1)
        self._rows[:0] = new
        self._cells[:0] = [cells(r) for r in new]
        self.endInsertRows()
        if len(self._rows) > self.keep:
            self.beginRemoveRows(QModelIndex(), self.keep, len(self._rows) - 1)
            del self._rows[self.keep :], self._cells[self.keep :]
            self.endRemoveRows()

    def record(self, row: int) -> RequestRecord:
        return self._rows[row]

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, col = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cells[row][col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and self._rows[row].status >= 400:
            return theme_colour("error")
        if role == Qt.ItemDataRole.ToolTipRole and col == 2:
            return self._rows[row].path
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None


class RequestLogView(QTableView):
    """Shows `log`: what it already holds, then every request it adds, batched on the UI thread.

    `log.added` fires on the server's thread; the bridge collects them (one post per batch, at most
    MAX_UPDATES_HZ a second) and a zero-delay timer hands each batch to the model in one insert.
    """

    def __init__(
        self,
        log: RequestLogLike,
        keep: int = DEFAULT_ROWS,
        *,
        max_rate_hz: float = MAX_UPDATES_HZ,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.log_model = RequestLogModel(keep, self)
        self.setModel(self.log_model)
        self.updates = 0  # model updates so far (tests check that bursts are coalesced)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)  # one line per request: a long model id is elided, its row stays short
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        for col, width in enumerate((70, 60, 190, 220, 60, 80, 60, 75, 55)):
            self.setColumnWidth(col, width)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)  # the path takes the spare width
        self._incoming: list[RequestRecord] = []
        self._apply_timer = QTimer(self)
        self._apply_timer.setSingleShot(True)
        self._apply_timer.setInterval(0)
        self._apply_timer.timeout.connect(self._apply)
        # A key per record keeps every one (a bridge keyed by value would keep only the latest).
        self._bridge = EventBridge(log.added, self, coalesce_key=id, max_rate_hz=max_rate_hz)
        self._bridge.fired.connect(self._on_request)
        # Subscribed first, then filled: a request logged in between is in both, and skipped once.
        initial = list(log.items())
        self._seen_at_start = {id(r) for r in initial}
        self.log_model.add(initial)

    def _on_request(self, record: RequestRecord) -> None:
        """Main thread, once per record of a batch: collect; the timer applies the batch once."""
        self._incoming.append(record)
        self._apply_timer.start()

    def _apply(self) -> None:
        batch, self._incoming = self._incoming, []
        if self._seen_at_start:
            batch = [r for r in batch if id(r) not in self._seen_at_start]
            self._seen_at_start.clear()
        if batch:
            self.updates += 1
            self.log_model.add(batch)

    def close_feed(self) -> None:
        self._bridge.close()
