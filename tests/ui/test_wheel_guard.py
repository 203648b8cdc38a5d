"""The mouse wheel over an unfocused number box or drop-down scrolls the page and changes nothing."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QPushButton, QScrollArea, QSpinBox, QVBoxLayout, QWidget

from app.ui.wheel_guard import WheelGuard


def wheel(widget: QWidget, down: bool = True) -> None:
    pos = QPointF(widget.rect().center())
    event = QWheelEvent(
        pos,
        QPointF(widget.mapToGlobal(pos.toPoint())),
        QPoint(0, 0),
        QPoint(0, -120 if down else 120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


@pytest.fixture
def page(qtbot):
    guard = WheelGuard.install(QApplication.instance())
    area = QScrollArea()
    inner = QWidget()
    layout = QVBoxLayout(inner)
    button = QPushButton("elsewhere")  # where the keyboard focus is: not on the boxes
    layout.addWidget(button)
    spin = QSpinBox()
    spin.setRange(1, 16)
    spin.setValue(4)
    combo = QComboBox()
    combo.addItems(["one", "two", "three"])
    layout.addWidget(spin)
    layout.addWidget(combo)
    layout.addSpacing(3000)  # a page taller than its window
    area.setWidget(inner)
    area.resize(300, 200)
    qtbot.addWidget(area)
    area.show()
    qtbot.waitExposed(area)
    button.setFocus()
    yield area, spin, combo
    QApplication.instance().removeEventFilter(guard)
    guard.deleteLater()


def test_an_unfocused_box_lets_the_page_scroll_and_keeps_its_value(page):
    area, spin, combo = page
    bar = area.verticalScrollBar()
    assert bar.value() == 0
    wheel(spin)
    wheel(combo)
    assert spin.value() == 4 and combo.currentIndex() == 0
    assert not spin.hasFocus()
    assert bar.value() > 0  # the wheel went to the page


def test_a_focused_box_takes_the_wheel(page, qtbot):
    _, spin, _ = page
    assert spin.focusPolicy() == Qt.FocusPolicy.StrongFocus  # a wheel never focuses it
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    wheel(spin, down=False)
    assert spin.value() == 5
