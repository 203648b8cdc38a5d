"""The message list: a QAbstractListModel over the shown thread, painted by a delegate from
per-message cached QTextDocuments, so a 1,000-message chat lays out only what is on screen.

Rows not yet rendered get an estimated height; when a row is painted its real height replaces the
estimate (sizeHintChanged). Rendered HTML is cached per (message id, version, reasoning state).
"""

from __future__ import annotations

import collections
import html
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QAbstractListModel, QByteArray, QModelIndex, QPointF, QRectF, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QCursor, QPainter, QTextCursor, QTextDocument
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyledItemDelegate, QStyleOptionViewItem

from app.core.chat.models import Message
from app.ui.chat.render import Rendered, plain_html, render_message

logger = logging.getLogger(__name__)

MessageRole = Qt.ItemDataRole.UserRole + 1
PAD = 10
DOC_CACHE = 120  # a screen shows a dozen rows; more only costs memory
# A streaming reply longer than this is shown as plain text until it finishes, and only the new text
# is appended to its document each flush: re-rendering and re-laying out a growing document every
# 40 ms costs time in proportion to its length and stalled the UI near the end of long replies.
STREAM_MARKDOWN_CHARS = 6_000
ROLE_LABEL = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool"}
STATUS_NOTE = {
    "stopped": "Stopped by you",
    "interrupted": "Interrupted: Hearth closed while this reply was being written",
    "streaming": "writing…",
}


@dataclass
class Row:
    message: Message
    text: str
    status: str
    branch: tuple[int, int] = (1, 1)  # (position, count) among the siblings
    stats: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    version: int = 0
    expanded: bool = False
    rendered: Rendered | None = field(default=None, repr=False)
    html_key: tuple | None = None

    @property
    def id(self) -> int:
        return self.message.id


def stats_line(stats: dict[str, Any] | None, finish_reason: str | None) -> str:
    s = stats or {}
    parts = []
    ttft = s.get("time_to_first_token_s") or 0
    if ttft:
        parts.append(f"TTFT {ttft:.2f} s")
    tps = s.get("decode_tok_s") or 0
    if tps:
        parts.append(f"{tps:.1f} tok/s")
    if s.get("generated_tokens"):
        parts.append(f"{int(s['generated_tokens'])} tokens")
    if finish_reason:
        parts.append(f"finish: {finish_reason}")
    return " · ".join(parts)


class SafeDocument(QTextDocument):
    """Loads nothing from outside: no remote (or local file) images, whatever the HTML says."""

    blocked: list[str] = []  # URLs refused, for tests and the log

    def loadResource(self, type_: int, url: QUrl) -> Any:  # noqa: N802 (Qt API)
        SafeDocument.blocked.append(url.toString())
        logger.debug("blocked a resource request for %s", url.toString())
        return QByteArray()  # empty: nothing loaded (returning None trips a PySide refcount bug)


class MessagesModel(QAbstractListModel):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []
        self._index: dict[int, int] = {}
        self.renders = 0  # markdown renders so far (tests check caching)

    # -- Qt model -------------------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row = self.rows[index.row()]
        if role == MessageRole:
            return row
        if role == Qt.ItemDataRole.DisplayRole:
            return row.text
        return None

    # -- content --------------------------------------------------------------------------------
    def set_messages(self, messages: list[Message], branches: dict[int, tuple[int, int]] | None = None,
                     live: dict[int, str] | None = None) -> None:
        """Replace the thread. `live`: text of replies streaming right now (newer than the DB)."""
        branches, live = branches or {}, live or {}
        self.beginResetModel()
        self.rows = [Row(m, live.get(m.id, m.content), m.status, branches.get(m.id, (1, 1)), m.stats,
                         m.finish_reason, m.error) for m in messages]
        self._index = {r.id: i for i, r in enumerate(self.rows)}
        self.endResetModel()

    def append(self, message: Message) -> None:
        n = len(self.rows)
        self.beginInsertRows(QModelIndex(), n, n)
        self.rows.append(Row(message, message.content, message.status))
        self._index[message.id] = n
        self.endInsertRows()

    def row_of(self, msg_id: int) -> int | None:
        return self._index.get(msg_id)

    def row(self, msg_id: int) -> Row | None:
        i = self._index.get(msg_id)
        return None if i is None else self.rows[i]

    def _changed(self, i: int) -> None:
        self.rows[i].version += 1
        idx = self.index(i)
        self.dataChanged.emit(idx, idx)

    def update_text(self, msg_id: int, text: str) -> None:
        i = self._index.get(msg_id)
        if i is not None:
            self.rows[i].text = text
            self._changed(i)

    def finish(self, msg_id: int, status: str, text: str, stats: dict | None, finish_reason: str | None,
               error: str | None) -> None:
        i = self._index.get(msg_id)
        if i is None:
            return
        r = self.rows[i]
        r.text, r.status, r.stats, r.finish_reason, r.error = text, status, stats, finish_reason, error
        self._changed(i)

    def toggle_reasoning(self, msg_id: int) -> None:
        i = self._index.get(msg_id)
        if i is not None:
            self.rows[i].expanded = not self.rows[i].expanded
            self._changed(i)

    # -- rendering ------------------------------------------------------------------------------
    def rendered(self, row: Row) -> Rendered:
        key = (row.version, row.expanded, row.status)
        if row.rendered is None or row.html_key != key:
            streaming = row.status == "streaming"
            if streaming and len(row.text) > STREAM_MARKDOWN_CHARS:
                body = Rendered(plain_html(row.text))
            else:
                body = render_message(row.text, role=row.message.role, reasoning_expanded=row.expanded,
                                      streaming=streaming)
            self.renders += 1
            row.rendered = replace(body, html=_header(row) + body.html + _footer(row))
            row.html_key = key
        return row.rendered


def _header(row: Row) -> str:
    label = ROLE_LABEL.get(row.message.role, row.message.role)
    out = f"<p style='margin-bottom:4px'><b>{label}</b>"
    pos, count = row.branch
    if count > 1:
        out += (f" &nbsp; <a href='branch:prev'>‹</a> <span style='color:#57606a'>{pos}/{count}</span>"
                " <a href='branch:next'>›</a>")
    actions = ["<a href='act:copy'>Copy</a>"]
    if row.message.role == "user":
        actions.append("<a href='act:edit'>Edit</a>")
    actions.append("<a href='act:delete'>Delete</a>")
    out += " &nbsp; <span style='font-size:small'>" + " · ".join(actions) + "</span></p>"
    return out


def _footer(row: Row) -> str:
    notes = []
    if row.message.role == "assistant":
        if line := stats_line(row.stats, row.finish_reason):
            notes.append(html.escape(line))
        if row.status in STATUS_NOTE:
            notes.append(STATUS_NOTE[row.status])
        if row.status == "error":
            notes.append("<span style='color:#cf222e'>Error: " + html.escape(row.error or "unknown") + "</span>")
    if not notes:
        return ""
    return "<p style='color:#57606a; font-size:small; margin-top:4px'>" + " · ".join(notes) + "</p>"


class MessageDelegate(QStyledItemDelegate):
    """Paints a row from its cached document; estimates the height of rows never painted."""

    def __init__(self, view: "MessageView") -> None:
        super().__init__(view)
        self.view = view
        self._docs: collections.OrderedDict[int, tuple[tuple, SafeDocument]] = collections.OrderedDict()
        self._estimates: dict[int, tuple[tuple, int]] = {}
        self._growing: dict[int, tuple[int, int]] = {}  # row id -> (text length shown, width): append-only

    def _append_streaming(self, row: Row, width: int) -> SafeDocument | None:
        """The cached document of a long streaming reply with only the new text appended, or None
        when it must be built afresh (first time, resized, or the text was not simply extended)."""
        hit, grown = self._docs.get(row.id), self._growing.get(row.id)
        if hit is None or grown is None or grown[1] != width or len(row.text) < grown[0]:
            return None
        doc = hit[1]
        cursor = QTextCursor(doc)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(row.text[grown[0]:])  # the layout is redone for the new blocks only
        self._growing[row.id] = (len(row.text), width)
        self._docs[row.id] = ((row.version, row.expanded, row.status, width), doc)
        self._docs.move_to_end(row.id)
        return doc

    def _width(self) -> int:
        return max(200, self.view.viewport().width() - 2 * PAD - 4)

    def document(self, row: Row, model: MessagesModel) -> SafeDocument:
        width = self._width()
        key = (row.version, row.expanded, row.status, width)
        hit = self._docs.get(row.id)
        if hit is not None and hit[0] == key:
            self._docs.move_to_end(row.id)
            return hit[1]
        growing = row.status == "streaming" and len(row.text) > STREAM_MARKDOWN_CHARS
        if growing and (doc := self._append_streaming(row, width)) is not None:
            return doc
        self._growing.pop(row.id, None)
        doc = SafeDocument()
        doc.setDocumentMargin(0)
        doc.setDefaultFont(self.view.font())
        if growing:  # header + the text so far; later flushes append (see _append_streaming)
            doc.setHtml(_header(row) + plain_html(row.text))
            self._growing[row.id] = (len(row.text), width)
        else:
            doc.setHtml(model.rendered(row).html)
        doc.setTextWidth(width)
        self._docs[row.id] = (key, doc)
        self._docs.move_to_end(row.id)
        while len(self._docs) > DOC_CACHE:
            self._docs.popitem(last=False)
        return doc

    def cached_height(self, row: Row) -> int | None:
        hit = self._docs.get(row.id)
        if hit is None or hit[0] != (row.version, row.expanded, row.status, self._width()):
            return None
        return math.ceil(hit[1].size().height())

    def estimate(self, row: Row) -> int:
        width = self._width()
        key = (row.version, width)
        hit = self._estimates.get(row.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        fm = self.view.fontMetrics()
        per_line = max(20, width // max(1, fm.averageCharWidth()))
        lines = sum(max(1, math.ceil(len(line) / per_line)) for line in row.text.splitlines()) or 1
        h = (lines + 3) * fm.lineSpacing()
        self._estimates[row.id] = (key, h)
        return h

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:  # noqa: N802
        row: Row = index.data(MessageRole)
        h = self.cached_height(row)
        last = index.row() == index.model().rowCount() - 1
        if h is None and (row.status == "streaming" or last):  # exact, so following lands at the end
            h = math.ceil(self.document(row, index.model()).size().height())
        return QSize(self._width() + 2 * PAD, (h if h is not None else self.estimate(row)) + 2 * PAD)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        row: Row = index.data(MessageRole)
        before = self.cached_height(row)
        doc = self.document(row, index.model())
        rect = option.rect
        painter.save()
        bg = QColor("#eef4ff") if row.message.role == "user" else QColor("#ffffff")
        painter.fillRect(rect.adjusted(2, 2, -2, -2), bg)
        painter.translate(rect.left() + PAD, rect.top() + PAD)
        doc.drawContents(painter, QRectF(0, 0, doc.textWidth(), rect.height()))
        painter.restore()
        height = math.ceil(doc.size().height()) + 2 * PAD
        if before is None and height != rect.height():
            self.sizeHintChanged.emit(index)  # the estimate was off: relayout with the real height

    def anchor_at(self, index: QModelIndex, pos) -> str:
        row: Row = index.data(MessageRole)
        doc = self.document(row, index.model())
        rect = self.view.visualRect(index)
        local = QPointF(pos.x() - rect.left() - PAD, pos.y() - rect.top() - PAD)
        return doc.documentLayout().anchorAt(local)


class MessageView(QListView):
    """Clicks on anchors become `anchor_clicked(msg_id, href)`; links are never followed."""

    anchor_clicked = Signal(int, str)
    context_requested = Signal(int, object)  # message id, global position

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("messageView")
        self.setUniformItemSizes(False)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setMouseTracking(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.delegate = MessageDelegate(self)
        self.setItemDelegate(self.delegate)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context)

    def at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _anchor(self, pos) -> tuple[int | None, str]:
        index = self.indexAt(pos)
        if not index.isValid():
            return None, ""
        return index.data(MessageRole).id, self.delegate.anchor_at(index, pos)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        msg_id, href = self._anchor(event.position().toPoint())
        if msg_id is not None and href and event.button() == Qt.MouseButton.LeftButton:
            self.anchor_clicked.emit(msg_id, href)
        super().mouseReleaseEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        _, href = self._anchor(event.position().toPoint())
        self.viewport().setCursor(QCursor(Qt.CursorShape.PointingHandCursor if href
                                          else Qt.CursorShape.ArrowCursor))
        if href and not href.split(":")[0] in ("copy", "think", "act", "branch"):
            self.setToolTip(f"Link (not opened): {href}")
        super().mouseMoveEvent(event)

    def _context(self, pos) -> None:
        index = self.indexAt(pos)
        if index.isValid():
            self.context_requested.emit(index.data(MessageRole).id, self.viewport().mapToGlobal(pos))
