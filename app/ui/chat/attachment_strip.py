"""The images waiting to be sent, above the message box: one thumbnail each; a click removes it."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget

from app.core.chat.attachments import Attachment

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
