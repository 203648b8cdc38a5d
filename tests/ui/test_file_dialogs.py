"""The app's file dialogs, as Qt draws them here (offscreen: no native dialog)."""

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QTreeView

from app.ui.file_dialogs import _dialog, existing_folder, save_file_name


def _files(folder, n=3, size=42_000):
    for i in range(n):
        (folder / f"model-{i}.gguf").write_bytes(b"\0" * size)


def test_sizes_types_and_dates_are_not_cut(qtbot, tmp_path, themed):
    _files(tmp_path)
    dialog = _dialog(None, "Import a GGUF file", str(tmp_path), "GGUF models (*.gguf)")
    qtbot.addWidget(dialog)
    dialog.show()
    tree = dialog.findChild(QTreeView)
    qtbot.waitUntil(lambda: tree.model().rowCount(tree.rootIndex()) == 3)
    qtbot.wait(50)
    header, metrics = tree.header(), tree.fontMetrics()
    row = tree.model().index(0, 0, tree.rootIndex())
    for column in range(1, header.count()):  # size, type, date: each wide enough for what it shows
        text = str(tree.model().index(row.row(), column, tree.rootIndex()).data())
        assert header.sectionSize(column) >= metrics.horizontalAdvance(text), (column, text)
    assert header.sectionSize(0) >= metrics.horizontalAdvance("model-0.gguf")
    assert dialog.width() >= 800


def _answer(action):
    """Run `action` on the modal dialog once it is open (exec() blocks the test until it closes)."""

    def attempt():
        dialog = QApplication.activeModalWidget()
        if isinstance(dialog, QFileDialog) and dialog.isVisible():
            action(dialog)
        else:
            QTimer.singleShot(20, attempt)

    QTimer.singleShot(20, attempt)


def test_save_starts_at_the_suggested_name_and_returns_the_choice(qtbot, tmp_path):
    suggested = tmp_path / "Reverse a string.md"
    _answer(lambda d: d.accept())
    assert save_file_name(None, "Export chat", suggested, "Markdown (*.md)") == str(suggested)


def test_cancel_returns_nothing(qtbot, tmp_path):
    _answer(lambda d: d.reject())
    assert existing_folder(None, "Models folder", tmp_path) == ""
