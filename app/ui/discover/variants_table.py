"""A model's variants with size, fit, speed and quality; the recommended one highlighted."""

from __future__ import annotations

from pathlib import PurePosixPath

from PySide6.QtCore import Signal
from PySide6.QtGui import QBrush, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QPushButton, QTableWidget, QTableWidgetItem, QWidget

from app.core.formats import GGUF
from app.core.models.recommend import Assessment
from app.core.units import fmt_bytes
from app.ui.download_button import DownloadButton, DownloadFeed
from app.ui.theme import theme_colour, verdict_colours
from app.ui.widgets.fit_view import fmt_rate

COLUMNS = ["Variant", "Format", "Size", "Fit", "Context", "tok/s", "Quality", ""]
FORMAT_COLUMN = 1
QUALITY_COLUMN = 6


class VariantsTable(QTableWidget):
    variant_selected = Signal(object)  # Assessment
    download_requested = Signal(object)  # Assessment
    # Why Downloads failed, one line a variant ("" when none): shown under the table, where it can wrap,
    # not beside the button, where it would widen the column and scroll the table sideways.
    download_errors = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(COLUMNS)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # Every column as wide as its header and cells, Fit too (stretched, it was squeezed to "…"), but Quality,
        # the least needed at a glance: it takes the spare width, and on a 900 px window gives up a little of
        # its own (its words stay in the tooltip) so the table never scrolls sideways.
        header.setSectionResizeMode(QUALITY_COLUMN, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(False)
        self.assessments: list[Assessment] = []
        self.locked = ""  # why no variant can be downloaded now (a gated repo without access); "" if they can
        self.feed: DownloadFeed | None = None  # download and library state for the buttons; None: plain Download
        self.itemSelectionChanged.connect(self._selected)

    def set_feed(self, feed: DownloadFeed | None) -> None:
        """Main thread: let each row's Download show its download's progress and the library's copy."""
        self.feed = feed
        for row in range(self.rowCount()):
            self.download_widget(row).set_feed(feed)

    def lock_downloads(self, why: str) -> None:
        """Main thread: disable every Download (with `why` as the tooltip), or enable them again with ""."""
        self.locked = why
        self.set_assessments(self.assessments)

    def set_assessments(self, assessments: list[Assessment]) -> None:
        self.assessments = list(assessments)
        self.setRowCount(len(self.assessments))
        for row, a in enumerate(self.assessments):
            self._fill(row, a)
        # "GGUF" on every row tells nothing and takes the width Quality needs on a 900 px window.
        self.setColumnHidden(FORMAT_COLUMN, len({a.variant.format for a in self.assessments}) <= 1)
        best = next((i for i, a in enumerate(self.assessments) if a.recommended), 0)
        if self.assessments:
            self.selectRow(best)

    def _fill(self, row: int, a: Assessment) -> None:
        p, s = a.plan, a.speed
        # A verdict short enough for its column; why a variant cannot run is in the cell's tooltip (a sentence
        # there would widen the table past a 900 px window).
        fit = p.label if (p and a.runnable) else "Can't run here"
        cells = [
            ("★ " if a.recommended else "") + a.variant.label + (" · Vision" if a.variant.sees_images else ""),
            a.variant.format.upper(),
            fmt_bytes(a.variant.size_bytes),
            fit,
            f"{p.options.n_ctx:,}" if p and p.fits and a.runnable else "",
            fmt_rate(s.decode_tok_s) if s and a.runnable else "",
            a.quality,
        ]
        for col, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if col == 3 and p and a.runnable:
                bg, fg = verdict_colours(p.verdict)
                item.setBackground(QBrush(bg))
                item.setForeground(QBrush(fg))
                item.setToolTip(p.explanation)
            elif col == 3:
                item.setToolTip(a.reason or "This machine cannot run this variant.")
            elif col == QUALITY_COLUMN:
                item.setToolTip(f"Quality: {text}")
            elif col == 0 and (projector := a.variant.projector):
                item.setToolTip(
                    f"Sees images: its vision projector ({PurePosixPath(projector).name}) downloads with it"
                )
            elif col == 0 and a.variant.mlx_vision:
                item.setToolTip("Sees images: mlx-vlm reads the vision half of this checkpoint")
            if col != 3 and a.recommended:
                item.setBackground(QBrush(theme_colour("accent_soft")))
            if a.recommended and col == 0:
                font = QFont(item.font())
                font.setBold(True)
                item.setFont(font)
            self.setItem(row, col, item)
        can = (a.runnable or a.variant.format == GGUF) and not self.locked
        # A grey Download says why: a gated repo's lock, or a format this machine cannot run (MLX off a Mac).
        why_not = self.locked or f"{a.variant.format.upper()} models cannot run on this machine: {a.reason}"
        button = DownloadButton(a, self.feed, can_download=can, why_not=why_not, inline_note=False)
        button.download_requested.connect(self.download_requested.emit)
        button.changed.connect(self._errors_changed)
        self.setCellWidget(row, len(COLUMNS) - 1, button)
        self._errors_changed()

    def download_error_text(self) -> str:
        """Each failed Download's message, with its variant's name."""
        errors = []
        for row in range(self.rowCount()):
            widget = self.cellWidget(row, len(COLUMNS) - 1)
            if isinstance(widget, DownloadButton) and (text := widget.error_text()):
                errors.append(f"{self.assessments[row].variant.label}: {text}")
        return "\n".join(errors)

    def _errors_changed(self) -> None:
        self.download_errors.emit(self.download_error_text())

    def _selected(self) -> None:
        rows = {i.row() for i in self.selectedIndexes()}
        if rows:
            self.variant_selected.emit(self.assessments[min(rows)])

    def row_text(self, row: int) -> list[str]:
        return [item.text() if (item := self.item(row, c)) is not None else "" for c in range(len(COLUMNS) - 1)]

    def download_widget(self, row: int) -> DownloadButton:
        widget = self.cellWidget(row, len(COLUMNS) - 1)
        assert isinstance(widget, DownloadButton)
        return widget

    def download_button(self, row: int) -> QPushButton:
        return self.download_widget(row).button

    def __len__(self) -> int:
        return self.rowCount()

    def recommended_row(self) -> int | None:
        return next((i for i, a in enumerate(self.assessments) if a.recommended), None)

    def sizeHint(self):  # noqa: N802 (Qt API)
        hint = super().sizeHint()
        hint.setHeight(min(360, 32 + 30 * max(1, self.rowCount())))
        return hint
