"""One device's planned memory as stacked segments (weights / KV / compute / overhead) against its budget."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.units import fmt_bytes
from app.ui.theme import theme_colour

_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))


def fmt_like(n: int, scale_of: int, digits: int = 2) -> str:
    """`n` in the unit fmt_bytes would pick for `scale_of`, so a sum's parts read in one unit."""
    for unit, size in _UNITS:
        if abs(scale_of) >= size:
            return f"{n / size:.{digits}f} {unit}"
    return f"{int(n)} B"


# Order, legend name and colour of each part DeviceUse.parts() reports.
SEGMENTS: tuple[tuple[str, str, QColor], ...] = (
    ("weights", "weights", QColor("#e07a3f")),
    ("kv", "KV", QColor("#4f8fd6")),
    ("compute", "compute", QColor("#9b6fd0")),
    ("overhead", "overhead", QColor("#8a8f98")),
)


def overflow_colour() -> QColor:
    """What does not fit, in the theme's "will not fit" colour (read at paint time: the theme can change)."""
    return theme_colour("fit_no_fit")


def begin_rounded_bar(widget: QWidget, background: QColor) -> tuple[QPainter, QRectF]:
    """Start painting a rounded bar: the background filled, later fills clipped to the rounded shape.

    Returns the painter (the caller fills its spans, then calls `end()`) and the bar's rectangle.
    """
    p = QPainter(widget)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    r = QRectF(widget.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
    path = QPainterPath()
    path.addRoundedRect(r, 5, 5)
    p.fillPath(path, background)
    p.setClipPath(path)
    return p, r


class StackedMemoryBar(QWidget):
    """Full width = max(budget, total), so anything past the budget shows as a red overhang."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parts: dict[str, int] = {key: 0 for key, _, _ in SEGMENTS}
        self._budget = 0
        self._pool = "memory"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(18)

    def set_values(self, parts: Mapping[str, int], budget_bytes: int, pool_label: str = "memory") -> None:
        """`parts`: bytes per segment key (missing keys count as 0); `pool_label`: "VRAM", "RAM", ..."""
        self._parts = {key: max(0, int(parts.get(key, 0))) for key, _, _ in SEGMENTS}
        self._budget = max(0, int(budget_bytes))
        self._pool = pool_label or "memory"
        self.setToolTip(self.description())
        self.setAccessibleDescription(self.description())
        self.update()

    @property
    def parts(self) -> dict[str, int]:
        return dict(self._parts)

    @property
    def total_bytes(self) -> int:
        return sum(self._parts.values())

    @property
    def budget_bytes(self) -> int:
        return self._budget

    @property
    def overflow_bytes(self) -> int:
        return max(0, self.total_bytes - self._budget)

    def description(self) -> str:
        scale = max(self.total_bytes, self._budget)
        pieces = ", ".join(f"{name} {fmt_like(self._parts[key], scale)}" for key, name, _ in SEGMENTS)
        budget = fmt_like(self._budget, scale, 1)
        text = f"{pieces} = {fmt_like(self.total_bytes, scale)} of {budget} usable {self._pool}"
        if self.overflow_bytes:
            text += f" ({fmt_bytes(self.overflow_bytes, 2)} over)"
        return text

    def segment_spans(self, width: float) -> list[tuple[str, float, float]]:
        """(key, x, w) of each non-empty segment when the bar is `width` pixels wide."""
        scale = width / max(self._budget, self.total_bytes, 1)
        spans, x = [], 0.0
        for key, _, _ in SEGMENTS:
            w = self._parts[key] * scale
            if w > 0:
                spans.append((key, x, w))
            x += w
        return spans

    def budget_x(self, width: float) -> float:
        return width * self._budget / max(self._budget, self.total_bytes, 1)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        return QSize(320, 18)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt API)
        p, r = begin_rounded_bar(self, theme_colour("meter_track"))
        colours = {key: colour for key, _, colour in SEGMENTS}
        for key, x, w in self.segment_spans(r.width()):
            p.fillRect(QRectF(r.x() + x, r.y(), w, r.height()), colours[key])
        if self.overflow_bytes:
            bx = r.x() + self.budget_x(r.width())
            over = QRectF(bx, r.y(), r.right() - bx, r.height())
            p.fillRect(over, overflow_colour())
            # Hatching keeps the overhang readable as "over" even for colour-blind users.
            p.fillRect(over, QBrush(QColor(0, 0, 0, 90), Qt.BrushStyle.BDiagPattern))
            p.setClipping(False)
            p.setPen(QPen(theme_colour("text"), 2))  # the budget line
            p.drawLine(int(bx), 0, int(bx), self.height())
        p.end()
