"""What waits to be sent with the message, above the message box: the images (a thumbnail each) and the document
files (a named chip each); a click removes one."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget

from app.core.chat.attachments import Attachment
from app.core.chat.retrieval import AttachedDocument
from app.core.units import fmt_n

TILE = 56  # the composer's tiles: small beside the message box (the thread shows them larger)


def thumbnail_pixmap(png: bytes) -> QPixmap:
    """A thumbnail made on the pool (attachments.py), as a pixmap; a null one when it is b""."""
    pixmap = QPixmap()
    if png:
        pixmap.loadFromData(png, "PNG")
    return pixmap


class AttachmentStrip(QWidget):
    """Hidden while empty. `changed` when an image is added or removed (UI thread)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachmentStrip")
        self.attachments: list[Attachment] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 4)
        self._row.addStretch(1)
        self.setVisible(False)

    def add(self, attachment: Attachment) -> None:
        self.attachments.append(attachment)
        self._rebuild()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.attachments):
            del self.attachments[index]
            self._rebuild()

    def set_attachments(self, attachments: Iterable[Attachment]) -> None:
        new = list(attachments)
        if new != self.attachments:
            self.attachments = new
            self._rebuild()

    def tiles(self) -> list[QToolButton]:
        items = (self._row.itemAt(i) for i in range(self._row.count()))
        return [w for item in items if item is not None and isinstance(w := item.widget(), QToolButton)]

    def _rebuild(self) -> None:
        for tile in self.tiles():
            self._row.removeWidget(tile)
            tile.deleteLater()
        for i, attachment in enumerate(self.attachments):
            tile = QToolButton()
            tile.setObjectName("attachmentTile")
            tile.setIcon(QIcon(thumbnail_pixmap(attachment.thumbnail)))
            tile.setIconSize(QSize(TILE, TILE))
            tile.setToolTip(f"{attachment.label}\nClick to remove")
            tile.setAccessibleName(f"Remove image {attachment.name}")
            tile.clicked.connect(lambda _c=False, i=i: self.remove(i))
            self._row.insertWidget(i, tile)
        self.setVisible(bool(self.attachments))
        self.changed.emit()


class DocumentStrip(QWidget):
    """The document files attached to the message being written; hidden while empty. `changed` when one is added
    or removed (UI thread)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documentStrip")
        self.documents: list[AttachedDocument] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 4)
        self._row.addStretch(1)
        self.setVisible(False)

    def add(self, document: AttachedDocument) -> None:
        self.documents.append(document)
        self._rebuild()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.documents):
            del self.documents[index]
            self._rebuild()

    def set_documents(self, documents: Iterable[AttachedDocument]) -> None:
        new = list(documents)
        if new != self.documents:
            self.documents = new
            self._rebuild()

    def chips(self) -> list[QToolButton]:
        items = (self._row.itemAt(i) for i in range(self._row.count()))
        return [w for item in items if item is not None and isinstance(w := item.widget(), QToolButton)]

    def _rebuild(self) -> None:
        for chip in self.chips():
            self._row.removeWidget(chip)
            chip.deleteLater()
        for i, doc in enumerate(self.documents):
            chip = QToolButton()
            chip.setObjectName("documentChip")
            chip.setText(f"{doc.name}  ×")
            chip.setToolTip(f"{doc.path}\n{fmt_n(doc.chars, 'character')} · click to remove")
            chip.setAccessibleName(f"Remove document {doc.name}")
            chip.clicked.connect(lambda _c=False, i=i: self.remove(i))
            self._row.insertWidget(i, chip)
        self.setVisible(bool(self.documents))
        self.changed.emit()
