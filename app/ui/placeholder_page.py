"""A page whose feature has not shipped yet: says so plainly, shows nothing fake."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class PlaceholderPage(QWidget):
    def __init__(self, title: str, note: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        heading = QLabel(title)
        heading.setObjectName("pageTitle")
        self.note = QLabel(note)
        self.note.setWordWrap(True)
        layout.addWidget(heading)
        layout.addWidget(self.note)
        layout.addStretch(1)
        layout.setAlignment(Qt.AlignmentFlag.AlignTop)
