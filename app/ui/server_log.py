"""The Server page's live request log: newest first, the last N rows, fed in batches so a burst of
requests costs the UI thread a few model updates, not one per request. A request shows as it arrives
(in progress, with the time so far) and its row is filled in once it is answered."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QEvent, QModelIndex, QObject, QPersistentModelIndex, Qt, QTimer
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.core.events import Event
from app.ui.bridge import EventBridge
from app.ui.server_api import RequestLogLike, RequestRecord, RequestStart
from app.ui.server_model import fmt_clock, fmt_duration
from app.ui.theme import theme_colour

logger = logging.getLogger(__name__)

COLUMNS = ["Time", "Request", "Model", "Tokens", "Cached", "Drafts kept", "Duration", "Status"]
TIME, REQUEST, MODEL, TOKENS, CACHED, DRAFTS, DURATION, STATUS = range(len(COLUMNS))
NUMERIC = {TOKENS, CACHED, DRAFTS, DURATION, STATUS}
OPTIONAL = (CACHED, DRAFTS)  # shown once a request has a value for them: most never do
# The widest text a column usually holds: it is sized to that or to its header, whichever is wider.
SAMPLES = {
    TIME: "00:00:00",
    MODEL: "Llama-3.2-1B",
    TOKENS: "9,999 → 999",
    CACHED: "12,345",
    DRAFTS: "100% of 999",
    DURATION: "59.9 s",
    STATUS: "Running",
}
REQUEST_MIN_SAMPLE = "POST /v1/models"  # the request column shrinks no further; the table scrolls instead
CELL_PADDING = 20  # px around a cell's or a header's text (the style sheet's padding, and a margin)
IN_PROGRESS = "Running"  # the status of a request still being answered
DEFAULT_ROWS = 200
MAX_UPDATES_HZ = 8.0
ELAPSED_TICK_MS = 1000

Row = RequestRecord | RequestStart


def answered(item: Row) -> bool:
    """Whether `item` is a finished request (a RequestRecord) rather than one still being answered."""
    return hasattr(item, "status")


def cells(r: RequestRecord) -> list[str]:
    return [
        fmt_clock(r.at),
        f"{r.method} {r.path}",
        r.model or "—",
        f"{r.prompt_tokens:,} → {r.completion_tokens:,}" if r.prompt_tokens or r.completion_tokens else "",
        f"{r.cached_tokens:,}" if r.cached_tokens else "",
        f"{r.draft_accepted / r.draft_tokens:.0%} of {r.draft_tokens}" if r.draft_tokens else "",
        fmt_duration(r.duration_s),
        str(r.status),
    ]


def pending_cells(r: RequestStart, now: float) -> list[str]:
    """A request still being answered: the time it has taken so far, and "Running" for its status."""
    return [fmt_clock(r.at), f"{r.method} {r.path}", "", "", "", "", fmt_duration(max(0.0, now - r.at)), IN_PROGRESS]


def row_cells(item: Row, now: float) -> list[str]:
    return cells(item) if answered(item) else pending_cells(item, now)  # type: ignore[arg-type]


class RequestLogModel(QAbstractTableModel):
    """Rows newest first (by arrival), at most `keep` of them."""

    def __init__(self, keep: int = DEFAULT_ROWS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.keep = keep
        self._rows: list[Row] = []
        self._cells: list[list[str]] = []  # formatted once: data() is called far more often than rows arrive

    def add(self, items: Sequence[Row], now: float | None = None) -> int:
        """Main thread: `items` oldest first, as they arrived. A RequestStart shows in progress until the
        RequestRecord with its id fills its row in, where it is. Returns how many rows came in at the top."""
        now = time.time() if now is None else now
        new: list[Row] = []  # oldest first, not in the table yet
        for item in items:
            if answered(item) and item.id:
                pending = next((k for k, r in enumerate(new) if r.id == item.id), None)
                if pending is not None:  # started and answered within one batch
                    new[pending] = item
                    continue
                row = self._row_of(item.id)
                if row is not None:
                    self._rows[row], self._cells[row] = item, cells(item)  # type: ignore[arg-type]
                    self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))
                    continue
            elif not answered(item) and (self._row_of(item.id) is not None or any(r.id == item.id for r in new)):
                continue  # already shown, answered: the page opened between its start and its end
            new.append(item)
        new = list(reversed(new))[: self.keep]
        if not new:
            return 0
        self.beginInsertRows(QModelIndex(), 0, len(new) - 1)
        self._rows[:0] = new
        self._cells[:0] = [row_cells(r, now) for r in new]
        self.endInsertRows()
        if len(self._rows) > self.keep:
            self.beginRemoveRows(QModelIndex(), self.keep, len(self._rows) - 1)
            del self._rows[self.keep :], self._cells[self.keep :]
            self.endRemoveRows()
        return len(new)

    def _row_of(self, request_id: int) -> int | None:
        if not request_id:
            return None
        return next((i for i, r in enumerate(self._rows) if r.id == request_id), None)

    def record(self, row: int) -> Row:
        return self._rows[row]

    @property
    def in_progress(self) -> int:
        """How many rows are requests still being answered."""
        return sum(1 for r in self._rows if not answered(r))

    def refresh_elapsed(self, now: float | None = None) -> None:
        """Main thread: the time so far of each request still being answered."""
        now = time.time() if now is None else now
        for row, r in enumerate(self._rows):
            if not answered(r):
                self._cells[row] = pending_cells(r, now)
                index = self.index(row, DURATION)
                self.dataChanged.emit(index, index)

    def has_values(self, column: int) -> bool:
        return any(c[column] for c in self._cells)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, col = index.row(), index.column()
        r = self._rows[row]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._cells[row][col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            if not answered(r):
                return theme_colour("text_muted")
            if r.status >= 400:  # type: ignore[union-attr]
                return theme_colour("error")
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(r, col)
        return None

    def _tooltip(self, r: Row, col: int) -> str | None:
        if col == REQUEST:
            return f"{r.method} {r.path}"
        if not answered(r):
            return "Still being answered"
        if col == TOKENS and (r.prompt_tokens or r.completion_tokens):  # type: ignore[union-attr]
            return f"{r.prompt_tokens:,} prompt tokens in, {r.completion_tokens:,} tokens generated"  # type: ignore[union-attr]
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole and section == TOKENS:
            return "Prompt tokens read → tokens generated"
        if role == Qt.ItemDataRole.ToolTipRole and section == CACHED:
            return "Prompt tokens reused from an earlier request instead of read again"
        if role == Qt.ItemDataRole.ToolTipRole and section == DRAFTS:
            return "Speculative decoding: the share of drafted tokens the model kept"
        return None


class RequestLogView(QTableView):
    """Shows `log`: what it already holds, then every request it starts and adds, batched on the UI thread.

    `log.started` and `log.added` fire on the server's thread; one bridge collects both, in order (one post
    per batch, at most MAX_UPDATES_HZ a second) and a zero-delay timer hands each batch to the model in one
    update. While a request is in progress, its time so far is redrawn each second.
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
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a path's start and its end both show
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(REQUEST, QHeaderView.ResizeMode.Stretch)  # the request takes the spare width
        self.fit_columns()
        for col in OPTIONAL:
            self.setColumnHidden(col, True)
        self._incoming: list[Row] = []
        self._apply_timer = QTimer(self)
        self._apply_timer.setSingleShot(True)
        self._apply_timer.setInterval(0)
        self._apply_timer.timeout.connect(self._apply)
        self._elapsed_timer = QTimer(self)
        self._elapsed_timer.setInterval(ELAPSED_TICK_MS)
        self._elapsed_timer.timeout.connect(self._tick)
        # Starts and ends through one event, so one bridge delivers them in the order they happened.
        feed: Event[Row] = Event("request log view")
        unsubscribe = [log.started.connect(feed.emit), log.added.connect(feed.emit)]
        self._unsubscribe = lambda: [u() for u in unsubscribe]
        self.destroyed.connect(lambda *_: [u() for u in unsubscribe])  # not bound to self: it is being deleted
        # A key per record keeps every one (a bridge keyed by value would keep only the latest).
        self._bridge = EventBridge(feed, self, coalesce_key=id, max_rate_hz=max_rate_hz)
        self._bridge.fired.connect(self._on_request)
        # Subscribed first, then filled: a request logged in between is in both, and skipped once.
        initial = list(log.items())
        self._seen_at_start = {id(r) for r in initial}
        self.log_model.add(initial)
        self._show_optional_columns()

    def fit_columns(self) -> None:
        """Each column as wide as its header or the text it usually holds, so neither is clipped."""
        self.ensurePolished()
        header = self.horizontalHeader()
        header.ensurePolished()
        head, body = header.fontMetrics(), self.fontMetrics()
        for col, name in enumerate(COLUMNS):
            if col != REQUEST:
                wanted = max(head.horizontalAdvance(name), body.horizontalAdvance(SAMPLES.get(col, "")))
                self.setColumnWidth(col, wanted + CELL_PADDING)
        header.setMinimumSectionSize(body.horizontalAdvance("200") + CELL_PADDING)
        self.request_min_width = body.horizontalAdvance(REQUEST_MIN_SAMPLE) + CELL_PADDING

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self.fit_columns()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_request_column()

    def _fit_request_column(self) -> None:
        """The request column takes the spare width, but never shrinks below a short path: where the
        other columns leave less, it keeps that width and the table scrolls sideways instead."""
        header = self.horizontalHeader()
        shown = [c for c in range(len(COLUMNS)) if c != REQUEST and not header.isSectionHidden(c)]
        narrow = self.viewport().width() - sum(header.sectionSize(c) for c in shown) < self.request_min_width
        mode = QHeaderView.ResizeMode.Interactive if narrow else QHeaderView.ResizeMode.Stretch
        if header.sectionResizeMode(REQUEST) != mode:
            header.setSectionResizeMode(REQUEST, mode)
            if narrow:
                self.setColumnWidth(REQUEST, self.request_min_width)

    def _on_request(self, record: Row) -> None:
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
            bar = self.verticalScrollBar()
            at_top, before = bar.value() == bar.minimum(), bar.value()
            inserted = self.log_model.add(batch)
            self._show_optional_columns()
            if at_top:
                self.scrollToTop()  # the newest row, at the top, is the one in view
            else:  # reading older rows: they stay where they are, the new ones come in above
                per_item = self.verticalScrollMode() == QAbstractItemView.ScrollMode.ScrollPerItem
                step = 1 if per_item else self.verticalHeader().defaultSectionSize()
                bar.setValue(before + step * inserted)
        self._follow_progress()

    def _show_optional_columns(self) -> None:
        for col in OPTIONAL:
            if self.isColumnHidden(col) and self.log_model.has_values(col):
                self.setColumnHidden(col, False)
                self._fit_request_column()

    def _follow_progress(self) -> None:
        if self.log_model.in_progress and not self._elapsed_timer.isActive():
            self._elapsed_timer.start()
        elif not self.log_model.in_progress:
            self._elapsed_timer.stop()

    def _tick(self) -> None:
        self.log_model.refresh_elapsed()
        self._follow_progress()

    def close_feed(self) -> None:
        self._bridge.close()
        self._unsubscribe()
