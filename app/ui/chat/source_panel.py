"""The side panel a citation opens: one passage a reply was given, as it was saved with the reply (the file may
have changed since), with its file, page or section and collection, and Open file.

The passage is shown as plain text, never HTML: it is the text of a user's file, which may hold markup."""

from __future__ import annotations

import logging

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.core.chat.grounding import Source
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

PANEL_MIN_WIDTH = 240


def place_line(source: Source) -> str:
    """Where the passage is: its page and section, and the collection it came from (or that it was attached)."""
    parts = []
    if source.page is not None:
        parts.append(f"page {source.page}")
    if source.heading:
        parts.append(source.heading)
    parts.append(f"collection {source.collection}" if source.collection else "attached to the message")
    return " · ".join(parts)


class SourcePanel(QWidget):
    """Hidden until `show_source`. `notice(text, level)` (UI thread) when the file cannot be opened."""

    notice = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourcePanel")
        self.setMinimumWidth(PANEL_MIN_WIDTH)
        self.source: Source | None = None
        self.msg_id: int | None = None
        self.title = QLabel(wordWrap=True)
        self.title.setObjectName("sourceTitle")
        self.close_button = QToolButton()
        self.close_button.setText("×")
        self.close_button.setAccessibleName("Close the source")
        self.close_button.setToolTip("Close")
        self.place = QLabel(wordWrap=True)
        set_status(self.place, "muted")
        self.path = QLabel(wordWrap=True)
        self.path.setObjectName("sourcePath")
        set_status(self.path, "muted")
        self.passage = QPlainTextEdit(readOnly=True)
        self.passage.setObjectName("sourcePassage")
        self.passage.setAccessibleName("The passage")
        self.note = QLabel("As the model read it; the file may have changed since.", wordWrap=True)
        set_status(self.note, "muted")
        self.open_button = QPushButton("Open file")
        self.copy_button = QPushButton("Copy passage")
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.close_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.copy_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.place)
        layout.addWidget(self.path)
        layout.addWidget(self.passage, 1)
        layout.addWidget(self.note)
        layout.addLayout(buttons)
        self.close_button.clicked.connect(self.hide_source)
        self.open_button.clicked.connect(self.open_file)
        self.copy_button.clicked.connect(self._copy)
        self.setVisible(False)

    def show_source(self, msg_id: int, source: Source) -> None:
        """UI thread: show `source` (a passage reply `msg_id` was given)."""
        self.msg_id, self.source = msg_id, source
        self.title.setText(f"[{source.number}] {source.file.name}")
        self.place.setText(place_line(source))
        self.path.setText(str(source.file))
        self.passage.setPlainText(source.text)
        there = source.file.is_file()  # one stat, on a click
        self.open_button.setEnabled(there)
        self.open_button.setToolTip(str(source.file) if there else "The file is no longer at this path")
        self.setVisible(True)

    def hide_source(self) -> None:
        self.msg_id = self.source = None
        self.setVisible(False)

    def open_file(self) -> None:
        """Open the passage's file in the program the system opens it with; never a URL from the text."""
        if self.source is None:
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.source.file))):
            self.notice.emit(f"Could not open {self.source.file}", "error")

    def _copy(self) -> None:
        if self.source is not None:
            QGuiApplication.clipboard().setText(self.source.text)
