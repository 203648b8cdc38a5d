"""The Benchmark page: pick a model from My Models (or an OpenAI-compatible server) and a workload preset,
run it with a progress bar and Cancel, and read the result as plots against the planner's prediction and
a table; saved runs are listed, checked ones compared on the same axes, and exported as JSON or PNG.

The run itself goes through the model pool like a chat, or over HTTP to the endpoint, on the task pool;
it leaves the chat's model as it was (app/core/bench/loads.py), and says so when it had to put it back.
Reports are read and written on the task pool too."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.bench.driver import BenchCancelled, Progress
from app.core.bench.report import BenchReport
from app.core.bench.store import BenchStore
from app.core.bench.workload import PRESETS, Workload
from app.core.events import Event
from app.core.hardware.profile import HardwareProfile
from app.core.library import Library, LocalModel
from app.core.models.calibration import CalibrationStore
from app.core.runtime.job_host import JobHost
from app.ui.bench.run_setup import ENDPOINT, bench_runner, describe_workload, duration_text
from app.ui.bench.run_view import RunView
from app.ui.bench.saved_runs import SavedRuns
from app.ui.bridge import EventBridge
from app.ui.file_dialogs import save_file_name
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status
from app.ui.widgets.scroll import scrolling

logger = logging.getLogger(__name__)


class BenchPage(QWidget):
    run_finished = Signal(object)  # the BenchReport, once saved
    run_failed = Signal(str)  # the sentence shown (cancelled, or why it could not run)
    models_listed = Signal()  # the picker was filled again from My Models

    def __init__(
        self,
        host: JobHost,
        library: Library,
        store: BenchStore,
        tasks: TaskRunner,
        *,
        calibration: CalibrationStore | None = None,
        hardware: Callable[[], HardwareProfile | None] = lambda: None,
        save_dialog: Callable[[str, str], str] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`hardware()` gives the latest probed profile (main thread), or None before the first probe;
        `save_dialog(title, suggested)` asks where to export (a path, "" when cancelled)."""
        super().__init__(parent)
        self.host, self.library, self.store, self._tasks = host, library, store, tasks
        self.calibration = calibration
        self._hardware = hardware
        self._save_dialog = save_dialog or self._ask_path
        self.running = False
        self._cancel: threading.Event | None = None
        self._progress_event: Event[Progress] = Event()
        self._progress = EventBridge(self._progress_event, self, coalesce_key=lambda _p: None, max_rate_hz=8)
        self._progress.fired.connect(self._show_progress)
        self._endpoint_chosen = False  # the user picked the server entry (else a local model is preferred)

        title = QLabel("Benchmark")
        title.setObjectName("pageTitle")
        hint = QLabel(
            "Measure what this machine really does: time to first token, prefill and decode apart, beside "
            "what Hearth predicted. The chat's model is measured as it is loaded when it has the context the "
            "workload needs; otherwise the benchmark loads its own, and puts the chat's back afterwards."
        )
        hint.setObjectName("hint")
        hint.setWordWrap(True)

        self.source = QComboBox()
        self.source.setMinimumWidth(260)
        self.source.currentIndexChanged.connect(self._source_changed)
        self.source.activated.connect(lambda i: setattr(self, "_endpoint_chosen", self.source.itemData(i) == ENDPOINT))
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8080 (llama-server, Ollama, LM Studio, vLLM, Hearth…)")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("if the server needs one")
        self.model_id = QLineEdit()
        self.model_id.setPlaceholderText("its model id (empty: its only model)")
        self.preset = QComboBox()
        for name in PRESETS:
            self.preset.addItem(name.capitalize(), name)
        self.preset.currentIndexChanged.connect(self._preset_changed)
        self.preset_note = QLabel()
        self.preset_note.setObjectName("hint")
        self.preset_note.setWordWrap(True)

        form_box = QWidget()
        form_box.setMaximumWidth(760)  # fields as wide as what they hold, not the window
        form = QFormLayout(form_box)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Model", self.source)
        self._endpoint_rows = [("Server URL", self.url), ("API key", self.api_key), ("Model id", self.model_id)]
        for label, field in self._endpoint_rows:
            form.addRow(label, field)
        form.addRow("Workload", self.preset)
        form.addRow("", self.preset_note)
        self._form = form

        self.run_button = QPushButton("Run benchmark")
        self.run_button.setProperty("role", "primary")
        self.run_button.clicked.connect(lambda: self.start())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setVisible(False)
        self.progress.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # holds the focus while Cancel takes effect
        self.phase = QLabel()  # under the buttons, wrapping: a long step never widens the page
        self.phase.setWordWrap(True)
        self.phase.setVisible(False)
        set_status(self.phase, "muted")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setVisible(False)
        for button in (self.run_button, self.cancel_button):  # as wide as their words, the bar takes the rest
            button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.progress, 1)
        run_row.addStretch(0)  # takes the room while the bar is hidden

        self.runs = SavedRuns(store, tasks)
        self.runs.setMaximumWidth(300)
        self.runs.compare.connect(self._show)
        self.runs.message.connect(self._say)
        self.runs.export_json_button.clicked.connect(self._export_json_clicked)
        self.runs.export_png_button.clicked.connect(self._export_png_clicked)
        self.results = RunView()

        split = QSplitter()
        split.addWidget(self.runs)
        split.addWidget(self.results)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)

        body = QWidget()
        layout = QVBoxLayout(body)
        layout.addWidget(title)
        layout.addWidget(hint)
        layout.addWidget(form_box)
        layout.addLayout(run_row)
        layout.addWidget(self.phase)
        layout.addWidget(self.status)
        layout.addWidget(split, 1)
        scroll = scrolling(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

        self._preset_changed()
        self._source_changed()
        self._update_buttons()
        self.refresh_models()
        self.runs.refresh()

    # ---- sources and workloads ----

    def refresh_models(self) -> None:
        """Main thread: list My Models' ready models on the pool, then fill the picker."""
        self._tasks.run(lambda: self.library.list(status="ready"), self._models_listed, self._list_failed, owner=self)

    def _models_listed(self, models: list[LocalModel]) -> None:
        current = self.source.currentData()
        self.source.blockSignals(True)
        self.source.clear()
        for m in models:
            self.source.addItem(f"{m.name} · {m.format}", m)
        self.source.addItem("An OpenAI-compatible server…", ENDPOINT)
        keep = next((i for i in range(self.source.count()) if _same(self.source.itemData(i), current)), 0)
        if current == ENDPOINT and not self._endpoint_chosen:
            keep = 0  # the first local model: the server entry was only the default while there was none
        self.source.setCurrentIndex(keep)
        self.source.blockSignals(False)
        self._source_changed()
        self.models_listed.emit()

    def _list_failed(self, exc: BaseException) -> None:
        self._say(f"Could not read My Models: {exc}", "error")

    def _source_changed(self, *_: object) -> None:
        endpoint = self.source.currentData() == ENDPOINT
        for _label, field in self._endpoint_rows:
            self._form.setRowVisible(field, endpoint)
        self._update_buttons()

    def _preset_changed(self, *_: object) -> None:
        self.preset_note.setText(describe_workload(self.workload()))

    def workload(self) -> Workload:
        return PRESETS[self.preset.currentData() or "chat"].model_copy(deep=True)

    # ---- running ----

    def start(self, workload: Workload | None = None) -> None:
        """Main thread: run `workload` (the chosen preset by default) on the chosen source, on the pool."""
        if self.running:
            return
        workload = workload or self.workload()
        source = self.source.currentData()
        if source is None:
            self._say("Add a model in My Models first, or choose an OpenAI-compatible server.", "error")
            return
        if source == ENDPOINT and not self.url.text().strip():
            self._say("Give the server's URL, e.g. http://127.0.0.1:8080.", "error")
            return
        cancel = threading.Event()
        self._cancel = cancel
        endpoint = (self.url.text().strip(), self.api_key.text().strip() or None, self.model_id.text().strip() or None)
        hardware = self._hardware()
        emit = self._progress_event.emit  # any thread: the bridge re-posts it to this one

        def op() -> tuple[BenchReport, Path]:
            runner = bench_runner(self.host, source, endpoint, workload, self.calibration, hardware, emit, cancel)
            try:
                report = runner.run()
            except BenchCancelled as exc:
                if exc.partial is None:
                    raise
                report = exc.partial  # what was measured before Cancel, kept and marked partial
            return report, self.store.save(report)

        self.running = True
        self._say("")
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.phase.setText(
            "Reaching the server…" if source == ENDPOINT else "Getting the model ready (loading it if needed)…"
        )
        self.phase.setVisible(True)
        self._hand_focus(self.cancel_button)
        self._update_buttons()
        self._tasks.run(op, self._finished, self._failed, owner=self)

    def cancel(self) -> None:
        """Main thread: stop the run at its next request (the engine stops the current one at once)."""
        if self._cancel is not None:
            self._cancel.set()
            self.phase.setText("Cancelling: what was measured so far is kept as a partial report…")
            self._hand_focus(self.progress)
            self.cancel_button.setEnabled(False)

    def _show_progress(self, p: Progress) -> None:
        if not self.running:
            return
        if self._cancel is not None and self._cancel.is_set():
            return  # "Cancelling…" stays
        self.progress.setValue(int(p.fraction * 1000))
        parts = [p.phase[:1].upper() + p.phase[1:], p.step, f"{p.done} of {p.total} requests done"]
        if p.eta_s is not None:
            parts.append(f"about {duration_text(p.eta_s)} left")
        self.phase.setText(" · ".join(x for x in parts if x))

    def _finished(self, result: tuple[BenchReport, Path]) -> None:
        report, path = result
        self._end_run()
        self.runs.remember(path, report)
        restored = " ".join(n for n in report.notes if n.startswith(("Restored", "Could not load", "The chat's")))
        if report.partial:
            done = sum(c.completed for c in report.cells)
            text = f"Cancelled. What was measured ({done} requests) is saved as a partial run: {path.name}."
            self._say(f"{text} {restored}".strip(), "muted")
            self.run_failed.emit(text)
        else:
            self._say(f"Saved {path.name}. {restored}".strip(), "success")
            self.run_finished.emit(report)
        self.runs.refresh(check=path)

    def _failed(self, exc: BaseException) -> None:
        self._end_run()
        if isinstance(exc, BenchCancelled):
            text = "Cancelled before anything was measured; no report was saved."
            self._say(text, "muted")
        else:
            logger.info("benchmark failed: %s", exc)
            text = f"The benchmark could not run: {exc}"
            self._say(text, "error")
        self.run_failed.emit(text)

    def _end_run(self) -> None:
        self.running = False
        self._cancel = None
        self.run_button.setEnabled(True)
        self._hand_focus(self.run_button)  # before the progress bar holding it is hidden
        self.progress.setVisible(False)
        self.phase.setText("")
        self.phase.setVisible(False)
        self._update_buttons()

    def _hand_focus(self, to: QWidget) -> None:
        """Run and Cancel disable themselves: a focused widget that goes away hands the focus to the next
        one down the page, and the scroll area jumps to it, taking the progress off screen. Give it to a
        neighbour in the run row instead."""
        if any(w.hasFocus() for w in (self.run_button, self.cancel_button, self.progress) if w is not to):
            to.setEnabled(True)
            to.setFocus(Qt.FocusReason.OtherFocusReason)

    # ---- results and export ----

    def _show(self, reports: list[BenchReport]) -> None:
        if reports:
            self.results.show_reports(reports)
        else:
            self.results.no_run_checked(any_saved=bool(self.runs.saved))

    def _export_json_clicked(self) -> None:
        if self.runs.shown:
            target = self._save_dialog("Export the report as JSON", f"{self.runs.shown[0].id}.json")
            if target:
                self.runs.export_json(Path(target))

    def _export_png_clicked(self) -> None:
        if self.runs.shown:
            target = self._save_dialog("Export the charts as PNG", f"{self.runs.shown[0].id}.png")
            if target:
                self.runs.export_png(Path(target), self.results.charts.image)

    def _ask_path(self, title: str, suggested: str) -> str:
        path = save_file_name(self, title, Path.home() / suggested)
        return path

    # ---- small things ----

    def restyle(self) -> None:
        """Main thread: the theme changed; the charts draw again in its colours."""
        self.results.restyle()

    def _update_buttons(self) -> None:
        has_source = self.source.count() > 0 and self.source.currentData() is not None
        self.run_button.setEnabled(not self.running and has_source)
        self.cancel_button.setEnabled(self.running and self._cancel is not None and not self._cancel.is_set())
        self.source.setEnabled(not self.running)
        self.preset.setEnabled(not self.running)

    def _say(self, text: str, status: Any = None) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        set_status(self.status, status)


def _same(a: object, b: object) -> bool:
    if isinstance(a, LocalModel) and isinstance(b, LocalModel):
        return a.id == b.id
    return a == b
