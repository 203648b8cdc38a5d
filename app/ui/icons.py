"""Hearth's own SVG icons (resources/icons), drawn in the theme's colours: the files stroke in a
placeholder black that is replaced before rendering, so one file serves the light and the dark theme."""

from __future__ import annotations

import logging

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.core.resources import resource_path

logger = logging.getLogger(__name__)

PLACEHOLDER = "#000000"
SIZE = 20


def pixmap(name: str, colour: str, size: int = SIZE, ratio: float = 2.0) -> QPixmap:
    """`name`.svg drawn in `colour`, `size` logical pixels square (sharp at `ratio`× as well)."""
    svg = resource_path("icons", f"{name}.svg").read_text(encoding="utf-8").replace(PLACEHOLDER, colour)
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    out = QPixmap(int(size * ratio), int(size * ratio))
    out.fill(Qt.GlobalColor.transparent)
    painter = QPainter(out)
    renderer.render(painter, QRectF(0, 0, size * ratio, size * ratio))
    painter.end()
    out.setDevicePixelRatio(ratio)
    return out


def icon(name: str, colour: str, selected: str) -> QIcon:
    """Normal in `colour`, and in `selected` where the item is selected (on the accent)."""
    result = QIcon()
    if not resource_path("icons", f"{name}.svg").is_file():
        logger.warning("no icon %s", name)
        return result
    result.addPixmap(pixmap(name, colour), QIcon.Mode.Normal)
    result.addPixmap(pixmap(name, selected), QIcon.Mode.Selected)
    return result
