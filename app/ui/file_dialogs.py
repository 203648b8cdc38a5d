"""Open, save and folder dialogs for the whole app (main thread). The platform's own dialog where there is one;
where Qt draws its own (Linux without a desktop portal, and tests), a size that fits and detail columns
sized to their contents, since Qt's defaults cut sizes and dates to "41….KiB" and "4 12 2…"."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QHeaderView, QTreeView, QWidget

QT_DIALOG_SIZE = (820, 520)  # wide enough for name, size, type and date side by side


def save_file_name(parent: QWidget | None, caption: str, suggested: Path, filters: str = "") -> str:
    """The path the user chose to save to, or "" if they cancelled; starts at `suggested` (folder and name)."""
    dialog = _dialog(parent, caption, str(suggested), filters)
    dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
    return _run(dialog)


def open_file_name(parent: QWidget | None, caption: str, start: Path | str, filters: str = "") -> str:
    """An existing file the user picked, or ""."""
    dialog = _dialog(parent, caption, str(start), filters)
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    return _run(dialog)


def existing_folder(parent: QWidget | None, caption: str, start: Path | str) -> str:
    """An existing folder the user picked, or ""."""
    dialog = _dialog(parent, caption, str(start), "")
    dialog.setFileMode(QFileDialog.FileMode.Directory)
    dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
    return _run(dialog)


def _dialog(parent: QWidget | None, caption: str, start: str, filters: str) -> QFileDialog:
    dialog = QFileDialog(parent, caption, start, filters)
    fit_qt_dialog(dialog)
    return dialog


def fit_qt_dialog(dialog: QFileDialog) -> None:
    """Where Qt draws the dialog itself (it has a tree of files; a native one does not), make it wide
    enough and size the detail columns to what they show, the name taking the room that is left."""
    tree = dialog.findChild(QTreeView)
    if tree is None:
        return
    dialog.setViewMode(QFileDialog.ViewMode.Detail)
    dialog.resize(*QT_DIALOG_SIZE)
    # The app's tool buttons are padded for text; the dialog's are icon-only and lost their icons to it.
    dialog.setStyleSheet("QToolButton { padding: 3px; min-width: 24px; }")
    header = tree.header()
    header.setStretchLastSection(False)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    for column in range(1, header.count()):
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)


def _run(dialog: QFileDialog) -> str:
    try:
        if dialog.exec() != QFileDialog.DialogCode.Accepted:
            return ""
        chosen = dialog.selectedFiles()
        return chosen[0] if chosen else ""
    finally:
        dialog.deleteLater()
