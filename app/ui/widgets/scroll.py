"""A page body that scrolls on a small window rather than squeezing what it holds."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


def scrolling(body: QWidget, *, horizontal: bool = True) -> QScrollArea:
    """`body` in a frameless scroll area that resizes it to its width (and, without `horizontal`, never
    scrolls sideways)."""
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    if not horizontal:
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    scroll.setWidget(body)
    return scroll
