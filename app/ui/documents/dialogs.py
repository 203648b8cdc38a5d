"""The questions the Documents page asks (a new collection's name and model, a confirmation, files to add),
behind one object so tests answer them without a modal dialog. Main thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from app.ui.file_dialogs import existing_folder, fit_qt_dialog
from app.ui.theme import set_status

REEMBED_WARNING = (
    "Every file of {name} is read and embedded again with the new model; searches find only what is done "
    "so far until it finishes."
)


@dataclass(frozen=True)
class ModelChoices:
    """The library's ready models by role, most recently used first (read on the pool): what Settings →
    Documents and the page's model pickers offer."""

    embedding: list[str] = field(default_factory=list)
    rerankers: list[str] = field(default_factory=list)


class NewCollectionDialog(QDialog):
    """A name and the embedding model (the one new collections use by default is preselected)."""

    def __init__(self, name: str, models: list[str], model: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("New collection")
        self.name = QLineEdit(name)
        self.name.setPlaceholderText("Notes, Papers, Manuals…")
        self.model = QComboBox()
        for m in models:
            self.model.addItem(m)
        self.model.setCurrentIndex(max(0, self.model.findText(model)))
        self.error = QLabel()
        set_status(self.error, "error")
        self.error.setVisible(False)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Embedding model", self.model)
        buttons = QDialogButtonBox()
        create = buttons.addButton("Create", QDialogButtonBox.ButtonRole.AcceptRole)
        create.setProperty("role", "primary")
        create.setDefault(True)
        buttons.addButton("Cancel", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.setMinimumWidth(420)

    def accept(self) -> None:
        if not self.name.text().strip():
            self.error.setText("A collection needs a name.")
            self.error.setVisible(True)
            return
        super().accept()


class Dialogs:
    """The real dialogs, parented to the page."""

    def __init__(self, parent: QWidget) -> None:
        self._parent = parent

    def new_collection(self, name: str, models: list[str], model: str) -> tuple[str, str] | None:
        """(name, embedding model), or None if cancelled."""
        dialog = NewCollectionDialog(name, models, model, self._parent)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return dialog.name.text().strip(), dialog.model.currentText()

    def text(self, title: str, label: str, value: str) -> str | None:
        text, ok = QInputDialog.getText(self._parent, title, label, QLineEdit.EchoMode.Normal, value)
        return text.strip() if ok and text.strip() else None

    def confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self._parent, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def choose_model(self, collection: str, current: str, models: list[str]) -> str | None:
        """Another embedding model for `collection`, after saying that it embeds every file again."""
        others = [m for m in models if m != current]
        if not others:
            QMessageBox.information(
                self._parent,
                "Change embedding model",
                f"{current} is the only embedding model in My Models. Download another to change it.",
            )
            return None
        label = f"Embedding model for {collection}:\n\n" + REEMBED_WARNING.format(name=collection)
        model, ok = QInputDialog.getItem(self._parent, "Change embedding model", label, others, 0, False)
        return model if ok and model else None

    def files(self) -> list[Path]:
        dialog = QFileDialog(self._parent, "Add files", str(Path.home()))
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        fit_qt_dialog(dialog)
        if not dialog.exec():
            return []
        return [Path(f) for f in dialog.selectedFiles()]

    def folder(self) -> Path | None:
        chosen = existing_folder(self._parent, "Add a folder", Path.home())
        return Path(chosen) if chosen else None
