"""The Benchmark page's plots (Qt Charts): decode and prefill tok/s against prompt length, measured (solid,
with points) and predicted (dashed) for every run being compared, on the same axes; and the TTFT
distribution (p50 / p95 / p99 per prompt length). Colours come from the theme as the charts are drawn."""

from __future__ import annotations

import math

from PySide6.QtCharts import (
    QBarCategoryAxis,
    QBarSeries,
    QBarSet,
    QChart,
    QChartView,
    QLineSeries,
    QLogValueAxis,
    QScatterSeries,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen, QResizeEvent
from PySide6.QtWidgets import QGridLayout, QWidget

from app.core.bench.report import BenchReport
from app.ui.bench.series import SpeedSeries, legend_labels, speed_series, ttft_bars
from app.ui.theme import theme_colour

# One colour per compared run, in this order (palette tokens, so they follow the theme).
RUN_COLOURS = ("accent", "info", "success", "warning", "fit_cpu", "fit_no_fit")
LOG_SPREAD = 20  # largest ÷ smallest tok/s on a chart above which its axis turns logarithmic


def run_colour(i: int) -> QColor:
    return theme_colour(RUN_COLOURS[i % len(RUN_COLOURS)])


def _chart(title: str) -> QChart:
    chart = QChart()
    chart.setTitle(title)
    chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)  # a report is shown, not performed
    chart.setBackgroundBrush(theme_colour("surface"))
    chart.setBackgroundRoundness(8)
    chart.setTitleBrush(theme_colour("text"))
    font = QFont(chart.titleFont())
    font.setBold(True)
    chart.setTitleFont(font)
    chart.legend().setLabelColor(theme_colour("text"))
    chart.legend().setAlignment(Qt.AlignmentFlag.AlignBottom)
    chart.setMargins(QMargins(6, 6, 6, 6))
    return chart


def _style_axis(axis) -> None:
    axis.setLabelsColor(theme_colour("text_muted"))
    axis.setTitleBrush(theme_colour("text_muted"))
    axis.setGridLineColor(theme_colour("border"))
    axis.setLinePenColor(theme_colour("border"))


def _nice_max(v: float) -> float:
    """The axis top: a little above the largest value, so the top point is not on the frame."""
    return v * 1.15 if v > 0 else 1.0


class SpeedChart(QChartView):
    """tok/s (decode or prefill) against prompt tokens."""

    def __init__(self, which: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.which = which
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(300)
        self.setMinimumWidth(260)
        self.series_shown: list[SpeedSeries] = []
        self.log_scale = False
        self.show_reports([])

    def show_reports(self, reports: list[BenchReport]) -> None:
        title = "Decode" if self.which == "decode" else "Prefill"
        chart = _chart(f"{title} tok/s (dashed: predicted)")
        labels = legend_labels(reports)
        self.series_shown = [speed_series(r, self.which, label) for r, label in zip(reports, labels)]
        xs: list[float] = []
        ys: list[float] = []
        every_y = [y for s in self.series_shown for _, y in s.measured + s.predicted if y > 0]
        # Runs that differ a hundredfold (a tiny model beside a 7B) stay readable on a log scale.
        self.log_scale = bool(every_y) and max(every_y) / min(every_y) > LOG_SPREAD
        x_axis = QValueAxis()
        x_axis.setTitleText("prompt tokens")
        x_axis.setLabelFormat("%.0f")
        y_axis: QValueAxis | QLogValueAxis
        if self.log_scale:
            y_axis = QLogValueAxis()
            y_axis.setBase(10)
            y_axis.setMinorTickCount(0)  # decades only: minor lines at every 2..9 crowded the plot
        else:
            y_axis = QValueAxis()
        y_axis.setTitleText("tok/s (log scale)" if self.log_scale else "tok/s")
        y_axis.setLabelFormat("%.0f")
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        for i, s in enumerate(self.series_shown):
            colour = run_colour(i)
            for points, dashed in ((s.measured, False), (s.predicted, True)):
                if not points:
                    continue
                line = QLineSeries()
                line.setName(f"{s.label} — {'predicted' if dashed else 'measured'}")
                pen = QPen(colour, 2.0)
                if dashed:
                    pen.setStyle(Qt.PenStyle.DashLine)
                line.setPen(pen)
                for x, y in points:
                    line.append(QPointF(x, y))
                    xs.append(x)
                    ys.append(y)
                chart.addSeries(line)
                line.attachAxis(x_axis)
                line.attachAxis(y_axis)
                if not dashed:  # the measured points themselves, so one prompt length still shows
                    dots = QScatterSeries()
                    dots.setColor(colour)
                    dots.setBorderColor(colour)
                    dots.setMarkerSize(8)
                    for x, y in points:
                        dots.append(QPointF(x, y))
                    chart.addSeries(dots)
                    dots.attachAxis(x_axis)
                    dots.attachAxis(y_axis)
                    chart.legend().markers(dots)[0].setVisible(False)
        x_axis.setRange(0, _nice_max(max(xs, default=0)))
        x_axis.applyNiceNumbers()
        if isinstance(y_axis, QLogValueAxis):
            y_axis.setRange(10 ** math.floor(math.log10(min(every_y))), 10 ** math.ceil(math.log10(max(every_y))))
        else:
            y_axis.setRange(0, _nice_max(max(ys, default=0)))
            y_axis.applyNiceNumbers()
        _style_axis(x_axis)
        _style_axis(y_axis)
        old = self.chart()
        self.setChart(chart)
        if old is not None:
            old.deleteLater()


class TtftChart(QChartView):
    """Time to first token per prompt length: p50, p95 and p99 bars for each compared run."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(300)
        self.setMinimumWidth(260)
        self.bar_sets: list[QBarSet] = []
        self.show_reports([])

    def show_reports(self, reports: list[BenchReport]) -> None:
        chart = _chart("Time to first token (ms) — p50, p95, p99")
        bars = [ttft_bars(r, label) for r, label in zip(reports, legend_labels(reports))]
        categories: list[str] = []
        for b in bars:  # every prompt length any run measured, in order
            categories += [c for c in b.categories if c not in categories]
        categories.sort(key=lambda c: int(c.replace(",", "")))
        series = QBarSeries()
        self.bar_sets = []
        top = 0.0
        for i, b in enumerate(bars):
            base = run_colour(i)
            for name, values, shade in (("p50", b.p50, 100), ("p95", b.p95, 135), ("p99", b.p99, 170)):
                bar_set = QBarSet(f"{b.label} {name}" if len(bars) > 1 else name)
                colour = base.lighter(shade) if theme_colour("window").lightness() < 128 else base.darker(shade)
                bar_set.setColor(colour if name != "p50" else base)
                bar_set.setBorderColor(theme_colour("surface"))
                by_cat = dict(zip(b.categories, values))
                for c in categories:
                    bar_set.append(by_cat.get(c, 0.0))
                top = max([top, *values])
                series.append(bar_set)
                self.bar_sets.append(bar_set)
        chart.addSeries(series)
        x_axis = QBarCategoryAxis()
        x_axis.append(categories or [""])
        x_axis.setTitleText("prompt tokens")
        y_axis = QValueAxis()
        y_axis.setTitleText("ms")
        y_axis.setLabelFormat("%.0f")
        y_axis.setRange(0, _nice_max(top))
        y_axis.applyNiceNumbers()
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        series.attachAxis(x_axis)
        series.attachAxis(y_axis)
        _style_axis(x_axis)
        _style_axis(y_axis)
        old = self.chart()
        self.setChart(chart)
        if old is not None:
            old.deleteLater()


ONE_ROW_MIN_WIDTH = 960  # px: three charts in a row from here, else two above the TTFT one


class BenchCharts(QWidget):
    """The three charts, in one row when there is room; `image()` for the PNG export."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.decode = SpeedChart("decode")
        self.prefill = SpeedChart("prefill")
        self.ttft = TtftChart()
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self.rows = 0
        self._arrange(2)
        self.reports: list[BenchReport] = []

    def _arrange(self, rows: int) -> None:
        if rows == self.rows:
            return
        self.rows = rows
        for chart in (self.decode, self.prefill, self.ttft):
            self._grid.removeWidget(chart)
        self._grid.addWidget(self.decode, 0, 0)
        self._grid.addWidget(self.prefill, 0, 1)
        if rows == 1:
            self._grid.addWidget(self.ttft, 0, 2)
        else:
            self._grid.addWidget(self.ttft, 1, 0, 1, 2)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        self._arrange(1 if event.size().width() >= ONE_ROW_MIN_WIDTH else 2)
        super().resizeEvent(event)

    def show_reports(self, reports: list[BenchReport]) -> None:
        """Main thread: plot these runs (the first is the one the page describes) on shared axes."""
        self.reports = list(reports)
        for chart in (self.decode, self.prefill, self.ttft):
            chart.show_reports(self.reports)

    def restyle(self) -> None:
        """Main thread: the theme changed; draw again in its colours."""
        self.show_reports(self.reports)

    def image(self) -> QImage:
        """The charts as they are on screen (for Export PNG; saving it can happen on any thread)."""
        return self.grab().toImage()
