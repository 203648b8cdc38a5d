"""The "Chat template…" dialog (My Models, the chat's Advanced): pick Auto, one of Hearth's built-in formats, or
paste a template, for one model. Saving checks a pasted template in the sandbox (runtime.chat_templates) on
the pool and keeps the dialog open with the reason when it cannot be used."""

from __future__ import annotations

import logging

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.core.library.store import LocalModel
from app.core.runtime.chat_templates import AUTO, TemplatePrefs, format_options, template_of
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

CUSTOM = "\0custom"  # the combo's data for "Custom": the text box holds the template


class ChatTemplateDialog(QDialog):
    """`saved` is the pick kept (AUTO, a format's name or the template) once Save succeeded, else None."""

    def __init__(self, model: LocalModel, prefs: TemplatePrefs, tasks: TaskRunner, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Chat template — {model.name}")
        self.model, self.prefs, self.tasks = model, prefs, tasks
        self.saved: str | None = None
        intro = QLabel(
            "How this model's conversations are written into its prompt. Auto uses the template in the model "
            "file, or the format of its family when the file has none. Applies the next time it loads, in the "
            "chat and on the API."
        )
        intro.setWordWrap(True)
        self.auto_note = QLabel()
        self.auto_note.setWordWrap(True)
        self.choice = QComboBox()
        self.choice.addItem("Auto", AUTO)
        for name, label in format_options():
            self.choice.addItem(f"{label} ({name})", name)
        self.choice.addItem("Custom (paste a Jinja template)", CUSTOM)
        self.text = QPlainTextEdit()
        self.text.setPlaceholderText("{% for message in messages %}…{% endfor %}")
        self.error = QLabel()
        self.error.setObjectName("templateError")
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.error.setVisible(False)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for w in (intro, self.auto_note, self.choice, self.text, self.error, self.buttons):
            layout.addWidget(w)
        self.resize(560, 420)

        current = prefs.picked(model.id) or AUTO
        index = self.choice.findData(current) if current in (AUTO, *dict(format_options())) else -1
        if index < 0 and current:
            index = self.choice.findData(CUSTOM)
            self.text.setPlainText(current)
        self.choice.setCurrentIndex(max(index, 0))
        self.choice.currentIndexChanged.connect(self._choice_changed)
        self._choice_changed()
        path, fmt = model.path, model.format
        self.tasks.run(lambda: template_of(path, fmt), self._show_auto, lambda _exc: None, owner=self)

    def _show_auto(self, choice) -> None:
        if choice is not None:
            self.auto_note.setText(f"Auto for this model: {choice.reason}.")

    def _choice_changed(self, *_: object) -> None:
        custom = self.choice.currentData() == CUSTOM
        self.text.setEnabled(custom)
        self.text.setVisible(custom)

    def pick(self) -> str:
        data = self.choice.currentData()
        return self.text.toPlainText() if data == CUSTOM else str(data or AUTO)

    def save(self) -> None:
        """Check and keep the pick on the pool; close when kept, else say why and stay open."""
        pick, prefs, model_id = self.pick(), self.prefs, self.model.id
        self.buttons.setEnabled(False)
        self.error.setVisible(False)
        self.tasks.run(lambda: prefs.remember(model_id, pick), self._kept, self._refused, owner=self)

    def _kept(self, kept: str) -> None:
        self.saved = kept
        self.buttons.setEnabled(True)
        self.accept()

    def _refused(self, exc: BaseException) -> None:
        self.buttons.setEnabled(True)
        self.error.setText(f"This template cannot be used: {exc}")
        self.error.setVisible(True)
