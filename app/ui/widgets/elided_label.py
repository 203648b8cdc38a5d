"""A one-line label that ends a text too long for it in "…" and keeps the whole text in its tooltip."""

from __future__ import annotations

import math

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget


class ElidedLabel(QLabel):
    """`setText` takes the whole text; `text()` is what is shown (elided to the width), `full_text()`
    the whole. A plain QLabel only clips a long text at its edge, with no sign that more is hidden."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setText(text)

    def full_text(self) -> str:
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 (Qt API)
        self._full = text
        self.setToolTip(text)
        self._elide()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API): room for the whole text when there is some
        hint = super().sizeHint()
        # Rounded up from the exact width: elidedText measures exactly, and the rounded-down integer
        # advance elided a text that had just its own width ("Tiny-Llama-F16.g…").
        width = math.ceil(QFontMetricsF(self.font()).horizontalAdvance(self._full))
        return QSize(width + 2 * self.margin(), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt API): shrinks to "…", never widens the window
        return QSize(self.fontMetrics().horizontalAdvance("…"), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width = self.contentsRect().width() - 2 * self.margin()
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(0, width))
        if shown != super().text():
            super().setText(shown)
