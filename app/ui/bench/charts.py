"""The Benchmark page's plots (Qt Charts): decode and prefill tok/s against prompt length, measured (solid,
with points) and predicted (dashed) for every run being compared, on the same axes; and the TTFT
distribution (p50 / p95 / p99 per prompt length). Colours come from the theme as the charts are drawn."""

from __future__ import annotations

import html
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
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

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
    # One legend under the three charts (BenchCharts.legend) wraps; Qt's cuts each entry to a few letters.
    chart.legend().setVisible(False)
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


def label_format(low: float, high: float, ticks: int) -> str:
    """A printf format that writes every tick of a linear axis differently: as many decimals as the step
    between ticks needs (0.2 tok/s steps read 0.2, 0.4, not 0, 0, 1)."""
    step = (high - low) / max(1, ticks - 1)
    decimals = 0 if step <= 0 or step >= 1 else min(6, math.ceil(-math.log10(step) - 1e-9))
    if decimals and round(step * 10**decimals) != step * 10**decimals:
        decimals += 1  # a step of 0.25 needs two
    return f"%.{decimals}f"


def tick_labels(axis: QValueAxis) -> list[str]:
    """The labels a linear axis draws, as its format writes them (what a reader sees)."""
    ticks = axis.tickCount()
    step = (axis.max() - axis.min()) / max(1, ticks - 1)
    fmt = axis.labelFormat()
    return [fmt % (axis.min() + i * step) for i in range(ticks)]


def _nice_linear(axis: QValueAxis, top: float) -> None:
    axis.setRange(0, _nice_max(top))
    axis.applyNiceNumbers()
    axis.setLabelFormat(label_format(axis.min(), axis.max(), axis.tickCount()))


class SpeedChart(QChartView):
    """tok/s (decode or prefill) against prompt tokens."""

    def __init__(self, which: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.which = which
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumHeight(300)
        self.setMinimumWidth(0)  # BenchCharts keeps one chart's width and stacks them below it
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
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        for i, s in enumerate(self.series_shown):
            colour = run_colour(i)
            for points, dashed in ((s.measured, False), (s.predicted, True)):
                if not points:
                    continue
                line = QLineSeries()
                # What it is first, the run after: a cut label still says which line it is.
                line.setName(f"{'Predicted' if dashed else 'Measured'} · {s.label}")
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
        _nice_linear(x_axis, max(xs, default=0))
        if isinstance(y_axis, QLogValueAxis):
            y_axis.setLabelFormat("%g")  # decades below 1 tok/s read 0.1, not 0
            y_axis.setRange(10 ** math.floor(math.log10(min(every_y))), 10 ** math.ceil(math.log10(max(every_y))))
        else:
            _nice_linear(y_axis, max(ys, default=0))
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
        self.setMinimumWidth(0)  # BenchCharts keeps one chart's width and stacks them below it
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
                bar_set = QBarSet(f"{name} · {b.label}" if len(bars) > 1 else name)  # the percentile first
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
        _nice_linear(y_axis, top)
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


def legend_html(reports: list[BenchReport]) -> str:
    """Each run in its colour, its whole name (it wraps), then how the charts draw what."""
    runs = [
        f'<span style="color:{run_colour(i).name()}">■</span>&nbsp;{html.escape(label)}'
        for i, label in enumerate(legend_labels(reports))
    ]
    key = "Solid lines and dots: measured · dashed lines: predicted · bars: p50, p95, p99 from left to right"
    muted = theme_colour("text_muted").name()
    return "&nbsp;&nbsp; ".join(runs) + f'<br><span style="color:{muted}">{key}</span>'


ONE_ROW_MIN_WIDTH = 960  # px: three charts in a row from here, else two above the TTFT one
TWO_COLUMN_MIN_WIDTH = 560  # px: below this, one chart under the other
CHART_MIN_WIDTH = 260


class BenchCharts(QWidget):
    """The three charts, in one row when there is room; `image()` for the PNG export."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.decode = SpeedChart("decode")
        self.prefill = SpeedChart("prefill")
        self.ttft = TtftChart()
        self.legend = QLabel()  # which colour is which run, and how measured and predicted are drawn
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setMinimumWidth(0)
        # With no run there is nothing to plot: a sentence, not three frames of made-up ticks.
        self.empty = QLabel("No runs yet.")
        self.empty.setObjectName("hint")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setMinimumHeight(120)
        self.empty.setMinimumWidth(0)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.addWidget(self.legend, 0, 0, 1, 3)
        self._grid.addWidget(self.empty, 4, 0, 1, 3)
        self.setMinimumWidth(CHART_MIN_WIDTH)
        self.rows = 0
        self._arrange(2)
        self.reports: list[BenchReport] = []
        self.show_reports([])

    def _arrange(self, rows: int) -> None:
        """1: three in a row; 2: decode and prefill above the TTFT one; 3: one under the other."""
        if rows == self.rows:
            return
        self.rows = rows
        for old in (self.decode, self.prefill, self.ttft):
            self._grid.removeWidget(old)
        # Row 0 is the legend's, above the charts: read before them, and with them however they stack.
        places = {1: ((1, 0, 1, 1), (1, 1, 1, 1), (1, 2, 1, 1)), 2: ((1, 0, 1, 1), (1, 1, 1, 1), (2, 0, 1, 2))}
        charts: tuple[QChartView, ...] = (self.decode, self.prefill, self.ttft)
        for view, place in zip(charts, places.get(rows, ((1, 0, 1, 3), (2, 0, 1, 3), (3, 0, 1, 3)))):
            self._grid.addWidget(view, *place)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        width = event.size().width()
        self._arrange(1 if width >= ONE_ROW_MIN_WIDTH else 2 if width >= TWO_COLUMN_MIN_WIDTH else 3)
        super().resizeEvent(event)

    def show_reports(self, reports: list[BenchReport]) -> None:
        """Main thread: plot these runs (the first is the one the page describes) on shared axes."""
        self.reports = list(reports)
        for chart in (self.decode, self.prefill, self.ttft):
            chart.show_reports(self.reports)
            chart.setVisible(bool(self.reports))
        self.empty.setVisible(not self.reports)
        self.legend.setText(legend_html(self.reports))
        self.legend.setVisible(bool(self.reports))

    def restyle(self) -> None:
        """Main thread: the theme changed; draw again in its colours."""
        self.show_reports(self.reports)

    def image(self) -> QImage:
        """The charts as they are on screen (for Export PNG; saving it can happen on any thread)."""
        return self.grab().toImage()
