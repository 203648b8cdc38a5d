"""The saved benchmark runs: listed from the store (newest first), checked to compare, deleted, and the
described one exported as JSON or its charts as PNG. Every read and write of a file runs on the pool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from app.core.bench.report import BenchReport
from app.core.bench.store import BenchStore, SavedReport
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

MAX_COMPARED = 6  # runs on one set of axes before the legend stops being readable


class SavedRuns(QWidget):
    """`compare(reports)` fires (main thread) with the checked runs, read, the first checked first;
    `message(text, status)` with what happened (an export, an error)."""

    compare = Signal(list)
    listed = Signal(list)  # [SavedReport]
    message = Signal(str, object)

    def __init__(self, store: BenchStore, tasks: TaskRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store, self._tasks = store, tasks
        self.saved: list[SavedReport] = []
        self.loaded: dict[Path, BenchReport] = {}  # reports read so far, by file
        self.shown: list[BenchReport] = []
        self.list = QListWidget()
        self.list.setMinimumWidth(200)
        self.list.setWordWrap(True)  # a long model name wraps rather than losing its end
        self.list.itemChanged.connect(lambda _i: self._compare_checked())
        self.export_json_button = QPushButton("Export JSON…")
        self.export_png_button = QPushButton("Export PNG…")
        self.delete_button = QPushButton("Delete")
        self.delete_button.setProperty("role", "destructive")
        self.delete_button.clicked.connect(self.delete_current)
        title = QLabel("Saved runs · check to compare")
        set_status(title, "muted-strong")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(title)
        layout.addWidget(self.list, 1)
        for b in (self.export_json_button, self.export_png_button, self.delete_button):
            layout.addWidget(b)
        self.set_shown([])

    # ---- listing and comparing ----

    def refresh(self, check: Path | None = None) -> None:
        """Main thread: list the saved reports on the pool; `check` is ticked (a run just saved)."""
        self._tasks.run(self.store.list, lambda listed: self._listed(listed, check), self._failed, owner=self)

    def remember(self, path: Path, report: BenchReport) -> None:
        """A report this page just saved: no need to read it back."""
        self.loaded[path] = report

    def _listed(self, listed: list[SavedReport], check: Path | None) -> None:
        checked = self.checked_paths()
        if check is not None:
            checked = [check, *[p for p in checked if p != check]]
        elif not checked and listed:
            checked = [listed[0].path]  # the newest, so the page never opens on empty charts
        self.saved = listed
        self.list.blockSignals(True)
        self.list.clear()
        for s in listed:
            partial = " · partial (cancelled)" if s.partial else ""
            item = QListWidgetItem(f"{s.model} · {s.engine}\n{s.created_at.replace('T', ' ')[:19]}{partial}")
            item.setData(Qt.ItemDataRole.UserRole, s.path)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if s.path in checked else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        self.list.blockSignals(False)
        self.delete_button.setEnabled(bool(listed))
        self.listed.emit(listed)
        self._compare_checked(order=checked)

    def checked_paths(self) -> list[Path]:
        out = []
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.checkState() == Qt.CheckState.Checked:
                out.append(item.data(Qt.ItemDataRole.UserRole))
        return out

    def set_checked(self, paths: list[Path]) -> None:
        """Main thread: compare exactly these saved runs, the first of them described."""
        self.list.blockSignals(True)
        for i in range(self.list.count()):
            item = self.list.item(i)
            on = item.data(Qt.ItemDataRole.UserRole) in paths
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
        self.list.blockSignals(False)
        self._compare_checked(order=paths)

    def _compare_checked(self, order: list[Path] | None = None) -> None:
        checked = self.checked_paths()
        paths = [p for p in (order or []) if p in checked] + [p for p in checked if p not in (order or [])]
        paths = paths[:MAX_COMPARED]
        missing = [p for p in paths if p not in self.loaded]
        store = self.store

        def op() -> dict[Path, BenchReport]:
            return {p: store.load(p) for p in missing}

        def done(got: dict[Path, BenchReport]) -> None:
            self.loaded.update(got)
            self.set_shown([self.loaded[p] for p in paths if p in self.loaded])

        if not missing:
            done({})
            return
        self._tasks.run(op, done, self._failed, owner=self)

    def set_shown(self, reports: list[BenchReport]) -> None:
        self.shown = reports
        for b in (self.export_json_button, self.export_png_button):
            b.setEnabled(bool(reports))
        self.compare.emit(reports)

    def delete_current(self) -> None:
        """Main thread: delete the selected (or else the first checked) saved run, on the pool."""
        item = self.list.currentItem()
        path = item.data(Qt.ItemDataRole.UserRole) if item is not None else next(iter(self.checked_paths()), None)
        if path is None:
            return
        self.loaded.pop(path, None)
        self._tasks.run(lambda: self.store.delete(path), lambda _r: self.refresh(), self._failed, owner=self)

    # ---- export ----

    def export_json(self, target: Path) -> None:
        """Main thread: write the described run's report (validated, as saved) to `target`, on the pool."""
        if not self.shown:
            return
        report = self.shown[0]
        self.message.emit(f"Exporting {target.name}…", "muted")
        self._tasks.run(
            lambda: BenchStore(target.parent).save(report, target), self._exported, self._failed, owner=self
        )

    def export_png(self, target: Path, grab: Callable[[], QImage]) -> None:
        """Main thread: `grab()` the charts here (Qt's, this thread), write the file on the pool."""
        image = grab()
        if target.suffix.lower() != ".png":
            target = target.with_name(target.name + ".png")  # Qt picks the format by the suffix
        self.message.emit(f"Exporting {target.name}…", "muted")

        def op() -> Path:
            if not image.save(str(target)):
                raise OSError(f"could not write {target}")
            return target

        self._tasks.run(op, self._exported, self._failed, owner=self)

    def _exported(self, path: Path) -> None:
        self.message.emit(f"Exported {path}.", "success")

    def _failed(self, exc: BaseException) -> None:
        self.message.emit(f"That did not work: {exc}", "error")
