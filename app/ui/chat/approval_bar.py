"""The bar above the message box that asks before a tool runs: which server's tool, with what arguments (and,
before a server's first start, the command that starts it); Allow once, Always allow this tool, or Deny."""

from __future__ import annotations

import json

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.chat.tool_loop import PendingCall

SHOWN_ARGUMENTS = 600  # characters of the arguments shown; the whole text is in the tooltip


class ApprovalBar(QFrame):
    """Hidden until a call waits. `answered(approval)` (UI thread): "once", "always" or "deny"."""

    answered = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("approvalBar")
        self.question = QLabel(wordWrap=True)
        self.arguments = QLabel(wordWrap=True)
        self.arguments.setObjectName("approvalArguments")
        self.start_note = QLabel(wordWrap=True)
        self.start_note.setObjectName("hint")
        self.once = QPushButton("Allow once")
        self.once.setProperty("role", "primary")
        self.always = QPushButton("Always allow this tool")
        self.deny = QPushButton("Deny")
        for button, answer in ((self.once, "once"), (self.always, "always"), (self.deny, "deny")):
            button.clicked.connect(lambda _c=False, a=answer: self._answer(a))
        row = QHBoxLayout()
        row.addStretch(1)
        for button in (self.deny, self.always, self.once):
            row.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.question)
        layout.addWidget(self.arguments)
        layout.addWidget(self.start_note)
        layout.addLayout(row)
        self.setVisible(False)

    def ask(self, call: PendingCall, first_start: str = "") -> None:
        """Show `call`; `first_start`: the command its server will run, when it has not started yet."""
        self.question.setText(f"The model wants to call <b>{call.tool}</b> from <b>{call.server}</b>.")
        text = json.dumps(call.arguments, ensure_ascii=False, indent=1)
        self.arguments.setText(text if len(text) <= SHOWN_ARGUMENTS else text[:SHOWN_ARGUMENTS] + "…")
        self.arguments.setToolTip(text)
        self.start_note.setText(f"Its server starts first: {first_start}" if first_start else "")
        self.start_note.setVisible(bool(first_start))
        self.setVisible(True)
        self.once.setFocus()

    def _answer(self, approval: str) -> None:
        self.setVisible(False)
        self.answered.emit(approval)
