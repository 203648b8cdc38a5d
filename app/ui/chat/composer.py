"""The chat composer: the message box (Enter sends), the line saying why sending waits, and the
Regenerate / Stop / Send row. It owns its widgets; the reply controller reads and fills the text."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.runtime.jobs import HostState


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter is a newline; Tab and Shift+Tab move the focus, as in any form."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # A chat message hardly needs a tab character; keyboard users need a way out of the box.
        self.setTabChangesFocus(True)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt API)
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def reason_not_to_send(state: HostState, replying: bool) -> str:
    """Why sending is not possible now ('' when it is), given the host's state."""
    if state.status == "loading":
        return "Loading the model…"
    if state.model is None:
        return "The model failed to load (see above)" if state.status == "error" else "Load a model to chat"
    if replying:
        return "Replying… (Esc to stop)"
    return ""


class ComposerBox(QWidget):
    """`send_requested` (Enter or Send), `stop_requested`, `regenerate_requested`, `text_changed`."""

    send_requested = Signal()
    stop_requested = Signal()
    regenerate_requested = Signal()
    text_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = Composer()
        self.editor.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.editor.setMaximumHeight(110)
        self.reason = QLabel()
        self.reason.setObjectName("composerReason")
        self.send_button = QPushButton("Send")
        self.send_button.setProperty("role", "primary")
        self.stop_button = QPushButton("Stop")
        self.regen_button = QPushButton("Regenerate")
        self.editor.submitted.connect(self.send_requested)
        self.editor.textChanged.connect(self.text_changed)
        self.send_button.clicked.connect(lambda: self.send_requested.emit())
        self.stop_button.clicked.connect(lambda: self.stop_requested.emit())
        self.regen_button.clicked.connect(lambda: self.regenerate_requested.emit())
        row = QHBoxLayout()
        row.addWidget(self.reason, 1)
        for b in (self.regen_button, self.stop_button, self.send_button):
            row.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.editor)
        layout.addLayout(row)

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str) -> None:
        self.editor.setPlainText(text)

    def clear(self) -> None:
        self.editor.clear()

    def focus(self) -> None:
        self.editor.setFocus()

    def refresh(
        self, reason: str, *, loaded: bool, editing: bool, busy: str, replying: bool, can_regenerate: bool
    ) -> None:
        """Enable what can be used now; the reason line says why the rest waits (or what is being edited)."""
        self.editor.setEnabled(loaded)
        edit = "Editing a message: Enter resends it, Esc cancels" if editing else ""
        self.reason.setText(reason or edit or (f"{busy}: your message waits its turn" if busy else ""))
        self.send_button.setEnabled(not reason and bool(self.text().strip()))
        self.stop_button.setEnabled(replying)
        self.regen_button.setEnabled(not reason and can_regenerate)
