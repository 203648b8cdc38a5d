"""The message view: a QListView painted by a delegate from per-message cached QTextDocuments, so
a 1,000-message chat renders only what is on screen.

Rows not yet painted get an estimated height; when a row is painted its real height replaces the
estimate in the model's item. Documents are cached by what they show, like the model's HTML.
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Any, ClassVar

from PySide6.QtCore import (
    QAbstractItemModel,
    QByteArray,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QPointF,
    QRectF,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import QColor, QCursor, QImage, QPainter, QTextCursor, QTextDocument
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyledItemDelegate, QStyleOptionViewItem, QWidget

from app.core.chat.attachments import THUMB_SIDE
from app.ui.chat.messages_model import STREAM_MARKDOWN_CHARS, MessagesModel, Row, header_html
from app.ui.chat.render import look, plain_html

logger = logging.getLogger(__name__)

PAD = 10
DOC_CACHE = 120  # a screen shows a dozen rows; more only costs memory


def _messages(model: QAbstractItemModel | None) -> MessagesModel:
    """The view's model: Qt hands it back as a QAbstractItemModel; it is always the chat's MessagesModel."""
    assert isinstance(model, MessagesModel)
    return model


class SafeDocument(QTextDocument):
    """Loads nothing from outside: no remote (or local file) images, whatever the HTML says; only the
    message's own thumbnails, handed over by name (`images`)."""

    # The latest URLs refused, process-wide (for tests and the log); bounded, so a long session cannot grow it.
    blocked: ClassVar[collections.deque[str]] = collections.deque(maxlen=256)

    def __init__(self, images: dict[str, QImage] | None = None) -> None:
        super().__init__()
        self._images = images or {}

    def loadResource(self, type_: int, url: QUrl | str) -> Any:  # noqa: N802 (Qt API)
        url = QUrl(url)
        if (image := self._images.get(url.toString())) is not None:
            return image
        SafeDocument.blocked.append(url.toString())
        logger.debug("blocked a resource request for %s", url.toString())
        return QByteArray()  # empty: nothing loaded (returning None trips a PySide refcount bug)


# While a long reply streams, a paragraph is shown in pieces of about this many characters: Qt lays out a
# whole paragraph on every append, and one of 30,000 characters (a model that writes no line breaks) cost
# 19 ms a flush, doubled on a busy machine. The finished reply is rendered whole, as written.
STREAM_PARAGRAPH_CHARS = 2_000


def paragraph_pieces(text: str, run: int) -> tuple[str, int]:
    """`text` with a space turned into a line break wherever its paragraph passes STREAM_PARAGRAPH_CHARS,
    and the length of the paragraph it ends in; `run`: the characters of the paragraph it continues."""
    lines = []
    for k, piece in enumerate(text.split("\n")):
        if k:
            run = 0
        parts = []
        while run + len(piece) > STREAM_PARAGRAPH_CHARS:
            cut = piece.find(" ", max(0, STREAM_PARAGRAPH_CHARS - run))
            if cut < 0:
                break
            parts.append(piece[:cut])
            piece, run = piece[cut + 1 :], 0
        parts.append(piece)
        run += len(piece)
        lines.append("\n".join(parts))
    return "\n".join(lines), run


class MessageDelegate(QStyledItemDelegate):
    """Paints a row from its cached document; estimates the height of rows never painted."""

    def __init__(self, view: MessageView) -> None:
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
        # The layout is redone for the last paragraph and the new ones only: keep each of them short.
        text, _ = paragraph_pieces(row.text[grown[0] :], doc.lastBlock().length() - 1)
        cursor.insertText(text)
        self._growing[row.id] = (len(row.text), width)
        self._docs[row.id] = ((row.key(), width), doc)
        self._docs.move_to_end(row.id)
        return doc

    def text_width(self) -> int:
        return max(200, self.view.viewport().width() - 2 * PAD - 4)

    def document(self, row: Row, model: MessagesModel) -> SafeDocument:
        width = self.text_width()
        key = (row.key(), width)
        hit = self._docs.get(row.id)
        if hit is not None and hit[0] == key:
            self._docs.move_to_end(row.id)
            return hit[1]
        growing = row.status == "streaming" and len(row.text) > STREAM_MARKDOWN_CHARS
        if growing and (doc := self._append_streaming(row, width)) is not None:
            return doc
        self._growing.pop(row.id, None)
        doc = SafeDocument(model.image_resources(row))
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
        if hit is None or hit[0] != (row.key(), self.text_width()):
            return None
        return math.ceil(hit[1].size().height())

    def estimate(self, row: Row) -> int:
        width = self.text_width()
        key = (len(row.text), width, row.image_count)
        hit = self._estimates.get(row.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        fm = self.view.fontMetrics()
        per_line = max(20, width // max(1, fm.averageCharWidth()))
        lines = sum(max(1, math.ceil(len(line) / per_line)) for line in row.text.splitlines()) or 1
        h = (lines + 3) * fm.lineSpacing() + (THUMB_SIDE + fm.lineSpacing() if row.image_count else 0)
        self._estimates[row.id] = (key, h)
        return h

    def size_for(self, row: Row, exact: bool) -> QSize:
        """The row's size hint (stored in the model's item, so layout never calls back into Python):
        its laid-out height when known or `exact`, else an estimate from the text."""
        h = self.cached_height(row)
        if h is None and (exact or row.status == "streaming"):
            h = math.ceil(self.document(row, _messages(self.view.model())).size().height())
        return QSize(self.text_width() + 2 * PAD, (h if h is not None else self.estimate(row)) + 2 * PAD)

    # No sizeHint override: QStyledItemDelegate's C++ one returns the item's SizeHintRole.

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        model = _messages(index.model())
        row = model.rows[index.row()]
        doc = self.document(row, model)
        rect = option.rect
        painter.save()
        bg = QColor(look().user_bg if row.message.role == "user" else look().assistant_bg)
        painter.fillRect(rect.adjusted(2, 2, -2, -2), bg)
        painter.translate(rect.left() + PAD, rect.top() + PAD)
        # Draw only the lines on screen: a long reply is one tall row, mostly scrolled away.
        shown = QRectF(option.rect).intersected(QRectF(self.view.viewport().rect()))
        top = max(0.0, shown.top() - rect.top() - PAD)
        doc.drawContents(painter, QRectF(0, top, doc.textWidth(), max(0.0, shown.height())))
        painter.restore()
        height = math.ceil(doc.size().height()) + 2 * PAD
        if height != rect.height():  # the estimate was off: store the real height, the view relays out
            model.set_height(index.row(), QSize(self.text_width() + 2 * PAD, height))

    def anchor_at(self, index: QModelIndex, pos: QPoint) -> str:
        model = _messages(index.model())
        row = model.rows[index.row()]
        doc = self.document(row, model)
        rect = self.view.visualRect(index)
        local = QPointF(pos.x() - rect.left() - PAD, pos.y() - rect.top() - PAD)
        return doc.documentLayout().anchorAt(local)


class MessageView(QListView):
    """Clicks on anchors become `anchor_clicked(msg_id, href)`; links are never followed."""

    anchor_clicked = Signal(int, str)
    context_requested = Signal(int, object)  # message id, global position

    def __init__(self, parent: QWidget | None = None) -> None:
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
        self._sized_width = 0
        # A drag of the window edge sends many resizes: size the rows once, on the next turn.
        self._resize_timer = QTimer(self, singleShot=True, interval=0)
        self._resize_timer.timeout.connect(self._resize_rows)

    def setModel(self, model: QAbstractItemModel | None) -> None:  # noqa: N802 (Qt API)
        """The model (a MessagesModel) sizes its rows with this view's delegate (at this view's width)."""
        super().setModel(model)
        _messages(model).sizer = self.delegate.size_for
        self._resize_rows()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API); also sent when the viewport resizes
        super().resizeEvent(event)
        if self.delegate.text_width() != self._sized_width:  # wrapped heights depend on the width
            self._resize_timer.start()

    def _resize_rows(self) -> None:
        model = self.model()
        if isinstance(model, MessagesModel):
            self._sized_width = self.delegate.text_width()
            model.resize_rows()
            self.scheduleDelayedItemsLayout()

    def at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def _anchor(self, pos) -> tuple[int | None, str]:
        index = self.indexAt(pos)
        if not index.isValid():
            return None, ""
        return _messages(self.model()).rows[index.row()].id, self.delegate.anchor_at(index, pos)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        msg_id, href = self._anchor(event.position().toPoint())
        if msg_id is not None and href and event.button() == Qt.MouseButton.LeftButton:
            self.anchor_clicked.emit(msg_id, href)
        super().mouseReleaseEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        _, href = self._anchor(event.position().toPoint())
        self.viewport().setCursor(QCursor(Qt.CursorShape.PointingHandCursor if href else Qt.CursorShape.ArrowCursor))
        if href and href.split(":")[0] not in ("copy", "think", "act", "branch", "tool", "cite", "source"):
            self.setToolTip(f"Link (not opened): {href}")
        super().mouseMoveEvent(event)

    def _context(self, pos) -> None:
        index = self.indexAt(pos)
        if index.isValid():
            row_id = _messages(self.model()).rows[index.row()].id
            self.context_requested.emit(row_id, self.viewport().mapToGlobal(pos))
