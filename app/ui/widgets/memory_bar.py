"""A used/free memory bar with a caption, painted by hand so it reads the same on every style."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.units import fmt_bytes
from app.ui.theme import theme_colour
from app.ui.widgets.stacked_bar import begin_rounded_bar  # one rounded-bar look for both bars


class MemoryBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._used = 0
        self._total = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(14)

    def set_values(self, used: int, total: int) -> None:
        self._used, self._total = max(0, used), max(0, total)
        free = max(0, self._total - self._used)
        self.setToolTip(f"{fmt_bytes(self._used)} used, {fmt_bytes(free)} free of {fmt_bytes(self._total)}")
        self.setAccessibleDescription(self.toolTip())
        self.update()

    @property
    def fraction_used(self) -> float:
        return self._used / self._total if self._total else 0.0

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(240, 14)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt API)
        p, r = begin_rounded_bar(self, theme_colour("meter_track"))  # the theme's, read as it paints
        used = QRectF(r.x(), r.y(), r.width() * min(1.0, self.fraction_used), r.height())
        p.fillRect(used, theme_colour("accent"))
        p.end()
