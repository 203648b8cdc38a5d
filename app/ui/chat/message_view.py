"""The message view: a QListView painted by a delegate from per-message cached QTextDocuments, so
a 1,000-message chat lays out only what is on screen.

Rows not yet rendered get an estimated height; when a row is painted its real height replaces the
estimate (sizeHintChanged). Documents are cached by what they show, like the model's HTML.
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Any

from PySide6.QtCore import QByteArray, QModelIndex, QPointF, QRectF, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QCursor, QPainter, QTextCursor, QTextDocument
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyledItemDelegate, QStyleOptionViewItem

from app.ui.chat.messages_model import STREAM_MARKDOWN_CHARS, MessageRole, MessagesModel, Row, header_html
from app.ui.chat.render import plain_html

logger = logging.getLogger(__name__)

PAD = 10
DOC_CACHE = 120  # a screen shows a dozen rows; more only costs memory


class SafeDocument(QTextDocument):
    """Loads nothing from outside: no remote (or local file) images, whatever the HTML says."""

    blocked: list[str] = []  # URLs refused, for tests and the log

    def loadResource(self, type_: int, url: QUrl) -> Any:  # noqa: N802 (Qt API)
        SafeDocument.blocked.append(url.toString())
        logger.debug("blocked a resource request for %s", url.toString())
        return QByteArray()  # empty: nothing loaded (returning None trips a PySide refcount bug)


class MessageDelegate(QStyledItemDelegate):
    """Paints a row from its cached document; estimates the height of rows never painted."""

    def __init__(self, view: "MessageView") -> None:
        super().__init__(view)
        self.view = view
        self._docs: collections.OrderedDict[int, tuple[tuple, SafeDocument]] = collections.OrderedDict()
        self._estimates: dict[int, tuple[tuple, int]] = {}
        self._growing: dict[int, tuple[int, int]] = {}  # row id -> (text length shown, width): append-only
        # Size hints by row number: QListView asks for every row's size on each relayout (each
        # streaming flush), so a long chat must answer from a dict. Dropped when the row changes.
        self._hints: dict[int, QSize] = {}
        self._hints_width = 0  # heights depend on the width: hints are dropped when it changes

    def forget_hints(self, first: int = 0, last: int | None = None) -> None:
        """Drop cached size hints of rows first..last, or from `first` on (UI thread, model signals)."""
        if first == 0 and last is None:
            self._hints.clear()
        elif last is None:
            self._hints = {i: h for i, h in self._hints.items() if i < first}
        else:
            for i in range(first, last + 1):
                self._hints.pop(i, None)

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
        self._docs[row.id] = ((row.key(), width), doc)
        self._docs.move_to_end(row.id)
        return doc

    def _width(self) -> int:
        return max(200, self.view.viewport().width() - 2 * PAD - 4)

    def document(self, row: Row, model: MessagesModel) -> SafeDocument:
        width = self._width()
        key = (row.key(), width)
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
            doc.setHtml(header_html(row) + plain_html(row.text))
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
        if hit is None or hit[0] != (row.key(), self._width()):
            return None
        return math.ceil(hit[1].size().height())

    def estimate(self, row: Row) -> int:
        width = self._width()
        key = (len(row.text), width)
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
        if self.view.viewport().width() != self._hints_width:
            self._hints_width = self.view.viewport().width()
            self._hints.clear()
        hint = self._hints.get(index.row())
        if hint is None:
            hint = self._hints[index.row()] = self._size_hint(index)
        return hint

    def _size_hint(self, index: QModelIndex) -> QSize:
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
        # Draw only the lines on screen: a long reply is one tall row, mostly scrolled away.
        shown = QRectF(option.rect).intersected(QRectF(self.view.viewport().rect()))
        top = max(0.0, shown.top() - rect.top() - PAD)
        doc.drawContents(painter, QRectF(0, top, doc.textWidth(), max(0.0, shown.height())))
        painter.restore()
        height = math.ceil(doc.size().height()) + 2 * PAD
        if before is None and height != rect.height():
            self._hints[index.row()] = QSize(self._width() + 2 * PAD, height)
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

    def setModel(self, model) -> None:  # noqa: N802 (Qt API)
        """The delegate's size hints follow the rows: changed rows, and every row after an insert or removal."""
        super().setModel(model)
        forget = self.delegate.forget_hints
        model.modelReset.connect(lambda: forget())
        model.layoutChanged.connect(lambda *_: forget())
        model.rowsInserted.connect(lambda _parent, first, _last: forget(first))
        model.rowsRemoved.connect(lambda _parent, first, _last: forget(first))
        model.dataChanged.connect(lambda top, bottom, *_: forget(top.row(), bottom.row()))

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
