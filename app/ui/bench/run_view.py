"""One benchmark shown (or several compared): what it measured and on what, the charts, and its table.
A thin view: `show(reports)` with reports already read."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from app.core.bench.report import BenchReport
from app.ui.bench.charts import BenchCharts
from app.ui.bench.series import TABLE_COLUMNS, describe_run, prefix_summary, run_label, table_rows
from app.ui.theme import set_status

NO_RUNS = "Pick a model and a workload, then Run benchmark: its charts and table appear here."


class RunView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.reports: list[BenchReport] = []
        self.heading = QLabel(NO_RUNS)
        self.heading.setObjectName("cardTitle")
        self.heading.setWordWrap(True)
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        set_status(self.details, "muted")
        self.prefix_note = QLabel()
        self.prefix_note.setWordWrap(True)
        self.notes = QLabel()
        self.notes.setWordWrap(True)
        set_status(self.notes, "muted")
        self.charts = BenchCharts()
        self.table = QTableWidget(0, len(TABLE_COLUMNS))
        self.table.setHorizontalHeaderLabels(TABLE_COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(180)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for w in (self.heading, self.details, self.prefix_note, self.notes):
            layout.addWidget(w)
        layout.addWidget(self.charts, 1)  # the plots first: they are what a run is for
        layout.addWidget(self.table)
        self.show_reports([])

    def show_reports(self, reports: list[BenchReport]) -> None:
        """Main thread: the first report is described and tabulated; all of them are plotted together."""
        self.reports = list(reports)
        self.charts.show_reports(self.reports)
        self.table.setRowCount(0)
        first = self.reports[0] if self.reports else None
        if first is None:
            self.details.setText("")
            self.prefix_note.setText("")
            self.notes.setText("")
        else:
            others = f" — compared with {len(self.reports) - 1} more" if len(self.reports) > 1 else ""
            partial = "Partial run (cancelled): " if first.partial else ""
            self.heading.setText(partial + run_label(first) + others)
            self.details.setText(describe_run(first))
            self.prefix_note.setText(prefix_summary(first))
            self.notes.setText("\n".join(n[:1].upper() + n[1:] for n in first.notes))
            rows = table_rows(first)
            self.table.setRowCount(len(rows))
            for r, row in enumerate(rows):
                for c, text in enumerate(row):
                    self.table.setItem(r, c, QTableWidgetItem(text))
        for label in (self.details, self.prefix_note, self.notes):
            label.setVisible(bool(label.text()))
        self.table.setVisible(first is not None)

    def no_run_checked(self, any_saved: bool = True) -> None:
        """Main thread: nothing to show; `any_saved`: there are saved runs, none of them checked."""
        self.show_reports([])
        self.heading.setText("No run checked: check a saved run to see it, or run one." if any_saved else NO_RUNS)
        self.charts.empty.setText("Nothing to plot: no run is checked." if any_saved else "No runs yet.")

    def restyle(self) -> None:
        """Main thread: the theme changed; the charts draw again in its colours."""
        self.charts.restyle()
