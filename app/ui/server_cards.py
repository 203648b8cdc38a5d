"""The Server page's cards, as views: the server's state, the API key, the snippets. The page drives them."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.ui.server_model import SLOTS_TOOLTIP
from app.ui.theme import set_status

COPIED_MS = 1500


def copy_text(text: str, button: QPushButton) -> None:
    """Put `text` on the clipboard and say so on the button for a moment."""
    QGuiApplication.clipboard().setText(text)
    label = button.property("idleText") or button.text()  # a second click while it still says "Copied"
    button.setProperty("idleText", label)
    button.setText("Copied")
    QTimer.singleShot(COPIED_MS, button, lambda: button.setText(label))


class Card(QFrame):
    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.body = QVBoxLayout(self)
        heading = QLabel(title)
        heading.setObjectName("cardTitle")
        self.body.addWidget(heading)


class StatusCard(Card):
    """Running or not, the base URL with Copy, Start / Stop, why a start failed, what the engine does and
    whether its context is too small for a coding agent."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Local API", parent)
        self.state_label = QLabel()
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.copy_url_button = QPushButton("Copy")
        self.copy_url_button.clicked.connect(lambda: copy_text(self.url.text(), self.copy_url_button))
        self.start_button = QPushButton("Start")
        self.start_button.setProperty("role", "primary")  # the style sheet's primary button
        self.stop_button = QPushButton("Stop")
        row = QHBoxLayout()
        row.addWidget(self.state_label)
        row.addWidget(self.url, 1)
        row.addWidget(self.copy_url_button)
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.error.setVisible(False)
        # Where Ollama's port answers too, or why it does not (ServerSettings.ollama_port).
        self.ollama = QLabel()
        self.ollama.setWordWrap(True)
        self.ollama.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.ollama.setVisible(False)
        self.engine = QLabel()
        self.engine.setWordWrap(True)
        self.slots = QLabel()
        self.slots.setObjectName("serverSlots")
        self.slots.setVisible(False)
        self.context_warning = QLabel()
        self.context_warning.setWordWrap(True)
        set_status(self.context_warning, "warning")
        self.context_warning.setVisible(False)
        self.body.addLayout(row)
        self.body.addWidget(self.error)
        self.body.addWidget(self.ollama)
        self.body.addWidget(self.engine)
        self.body.addWidget(self.slots)
        self.body.addWidget(self.context_warning)
        self.set_state("Stopped", running=False)

    def set_slots(self, text: str) -> None:
        """'Replies at once: 2 of 4 in use · 0 waiting'; hidden with "" (no model loaded)."""
        self.slots.setText(text)
        self.slots.setToolTip(SLOTS_TOOLTIP if text else "")
        self.slots.setVisible(bool(text))

    def set_state(self, text: str, *, running: bool) -> None:
        self.state_label.setText(text)
        set_status(self.state_label, "success" if running else "muted-strong")

    def set_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(bool(text))

    def set_ollama(self, url: str, error: str) -> None:
        """The extra listener on Ollama's port: its URL, or why it is not there (a warning); hidden with neither."""
        self.ollama.setText(f"Also answering as Ollama on {url}" if url else error)
        set_status(self.ollama, "warning" if error else "muted")
        self.ollama.setVisible(bool(url or error))

    def set_context_warning(self, text: str) -> None:
        self.context_warning.setText(text)
        self.context_warning.setVisible(bool(text))


class KeyCard(Card):
    """The key, hidden until Show; Copy, Regenerate… and, when there is none, Make a key."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("API key", parent)
        self.field = QLineEdit()
        self.field.setReadOnly(True)
        self.field.setEchoMode(QLineEdit.EchoMode.Password)
        self.field.setPlaceholderText("No key yet")
        self.show_button = QPushButton("Show")
        self.show_button.setCheckable(True)
        self.show_button.toggled.connect(self._reveal)
        self.copy_button = QPushButton("Copy")
        self.copy_button.clicked.connect(lambda: copy_text(self.field.text(), self.copy_button))
        self.regenerate_button = QPushButton("Regenerate…")
        self.regenerate_button.setProperty("role", "destructive")  # the old key stops working
        self.make_button = QPushButton("Make a key")
        row = QHBoxLayout()
        row.addWidget(self.field, 1)
        for button in (self.show_button, self.copy_button, self.regenerate_button, self.make_button):
            row.addWidget(button)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.body.addLayout(row)
        self.body.addWidget(self.note)

    @property
    def revealed(self) -> bool:
        return self.show_button.isChecked()

    def set_key(self, key: str, note: str) -> None:
        self.field.setText(key)
        for button in (self.show_button, self.copy_button, self.regenerate_button):
            button.setVisible(bool(key))
        self.make_button.setVisible(not key)
        self.note.setText(note)

    def _reveal(self, shown: bool) -> None:
        self.field.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.show_button.setText("Hide" if shown else "Show")


class SnippetCard(Card):
    """curl and Python snippets, one tab each, and a Copy for the one shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Call it", parent)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.tabs = QTabWidget()
        self.curl = QPlainTextEdit()
        self.python = QPlainTextEdit()
        for name, edit in (("curl", self.curl), ("Python (openai)", self.python)):
            edit.setReadOnly(True)
            edit.setFont(mono)
            edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            self.tabs.addTab(edit, name)
        self.copy_button = QPushButton("Copy snippet")
        self.note = QLabel()
        self.note.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(self.copy_button)
        self.body.addWidget(self.tabs, 1)
        self.body.addLayout(row)

    @property
    def shown_kind(self) -> str:
        return "curl" if self.tabs.currentWidget() is self.curl else "python"
