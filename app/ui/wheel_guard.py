"""Number boxes, drop-downs and sliders take the mouse wheel only when they have keyboard focus.

Qt gives a spin box, a combo box and a slider every wheel event over it: scrolling a settings page with
the pointer resting on one changes the setting (Parallel requests 4 → 3) and stops the page scrolling. One
application-wide filter makes them click-to-focus and, while unfocused, hands the wheel to the scroll area
they sit in, so the page scrolls as the user meant.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QSlider,
    QWidget,
)

# Not QScrollBar (an abstract slider too): a scroll area passes its wheel events on to its bars.
GUARDED = (QAbstractSpinBox, QComboBox, QSlider)


class WheelGuard(QObject):
    """Installed on the QApplication (main thread); `install(app)` makes one and keeps it alive."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind not in (QEvent.Type.Wheel, QEvent.Type.Polish) or not isinstance(watched, GUARDED):
            return False
        if kind == QEvent.Type.Polish:
            # Wheel focus would let the first wheel event focus the box and change it at once.
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if watched.hasFocus() or _in_open_popup(watched):
            return False
        area = _scroll_area_of(watched)
        if area is not None:
            QApplication.sendEvent(area.viewport(), event)  # the page scrolls, as the user meant
        return True

    @classmethod
    def install(cls, app: QApplication) -> WheelGuard:
        guard = cls(app)  # parented to the app: it lives as long as the app
        app.installEventFilter(guard)
        return guard


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    """The nearest scroll area the widget sits in (the box's own line edit or list are not one)."""
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def _in_open_popup(widget: QWidget) -> bool:
    """A combo box's open list scrolls with the wheel as usual."""
    return isinstance(widget, QComboBox) and widget.view().isVisible()
