"""'Recommended for this machine': the shipped catalogue ranked by the recommender, one row a model."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.models.catalog import CatalogPick
from app.core.units import fmt_bytes
from app.ui.download_button import DownloadButton, DownloadFeed
from app.ui.theme import set_status, set_verdict
from app.ui.widgets.fit_view import fmt_rate
from app.ui.widgets.message_label import MessageLabel
from app.ui.widgets.slow_speed import is_slow, slow_text, slow_why


def _params(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


class PickRow(QFrame):
    open_requested = Signal(object)  # CatalogPick
    download_requested = Signal(object)  # CatalogPick

    def __init__(self, pick: CatalogPick, feed: DownloadFeed | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pick = pick
        self.setObjectName("card")
        m, best = pick.model, pick.best
        grid = QGridLayout(self)
        # Wrapping, so a long name beside a wide badge (a slow pick's) wraps instead of widening the page.
        name = MessageLabel(m.name)
        name.setObjectName("cardTitle")
        name.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)  # level with the badge
        grid.addWidget(name, 0, 0)
        about = MessageLabel(f"{m.family} · {_params(m.params)} parameters · licence {m.license}")
        grid.addWidget(about, 1, 0, 1, 2)  # under the badge too: it has the room
        self.badge = QLabel()
        self.badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        rate = best.speed.decode_tok_s if best is not None and best.speed else None
        self.slow = is_slow(rate)
        if best is not None and best.plan is not None and self.slow and rate is not None:
            # It fits, but would write slower than people read: not the same badge as a pick that is quick.
            self.badge.setText(slow_text(rate))
            set_verdict(self.badge, "partial")  # the theme's amber: a caution, not a failure
            self.badge.setToolTip(f"{slow_why(rate)}\n\n{best.plan.label}: {best.plan.explanation}")
        elif best is not None and best.plan is not None:
            self.badge.setText(best.plan.label)
            set_verdict(self.badge, best.plan.verdict)
            self.badge.setToolTip(best.plan.explanation)
        if best is not None and best.plan is not None:
            speed = f"≈ {fmt_rate(rate)} tok/s" if rate else ""
            self.detail.setText(
                f"{best.variant.label} {best.variant.format.upper()} · "
                f"{fmt_bytes(best.variant.size_bytes)} · {speed} · {best.quality}"
            )
        else:
            self.badge.setText("Will not fit")
            set_verdict(self.badge, "no_fit")
            self.detail.setText(pick.recommendation.why)
        grid.addWidget(self.badge, 0, 1, Qt.AlignmentFlag.AlignVCenter)  # a pill its own height, not a button's
        grid.addWidget(self.detail, 2, 0, 1, 2)
        # Made before Details so Tab reaches the card's main action first (tab order is creation order).
        # A failure goes across the card under its details (self.error), wrapped: beside the button it was cut.
        self.download_widget = DownloadButton(best, feed, can_download=best is not None, inline_note=False)
        self.download_widget.download_requested.connect(lambda _a: self.download_requested.emit(self.pick))
        self.error = MessageLabel()
        set_status(self.error, "error")
        self.error.setVisible(False)
        grid.addWidget(self.error, 3, 0, 1, 3)
        self.download_widget.changed.connect(self._show_error)
        self._show_error()
        self.download_widget.set_primary(not self.slow)  # a slow pick is offered, not urged
        self.download = self.download_widget.button
        self.details = QPushButton("Details")
        self.details.clicked.connect(lambda: self.open_requested.emit(self.pick))
        grid.addWidget(self.download_widget, 0, 2)
        grid.addWidget(self.details, 1, 2)
        grid.setColumnStretch(0, 1)

    def _show_error(self) -> None:
        text = self.download_widget.error_text()
        self.error.setText(text)
        self.error.setVisible(bool(text))

    def text(self) -> str:
        return "\n".join(w.text() for w in self.findChildren(QLabel) if w is not self.download_widget.note)


class RecommendedList(QWidget):
    open_requested = Signal(object)
    download_requested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[PickRow] = []
        self.feed: DownloadFeed | None = None
        self.left_out: str | None = None  # the model 'Start here' already offers above: not listed twice
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel("Ranking models for this machine…")
        self._layout.addWidget(self.status)
        self._layout.addStretch(1)

    def set_feed(self, feed: DownloadFeed | None) -> None:
        self.feed = feed
        for row in self.rows:
            row.download_widget.set_feed(feed)

    def set_picks(self, picks: list[CatalogPick]) -> None:
        for row in self.rows:
            self._layout.removeWidget(row)
            row.deleteLater()
        self.rows = []
        for i, pick in enumerate(picks):
            row = PickRow(pick, self.feed)
            row.open_requested.connect(self.open_requested.emit)
            row.download_requested.connect(self.download_requested.emit)
            self._layout.insertWidget(1 + i, row)
            self.rows.append(row)
        self._leave_out()
        fits = sum(p.best is not None for p in picks)
        self.status.setText(f"{fits} of {len(picks)} catalogue models run on this machine; best first.")

    def leave_out(self, pick: CatalogPick | None) -> None:
        """Main thread: hide `pick`'s row while 'Start here' offers it (None: list every pick)."""
        self.left_out = pick.model.name if pick is not None else None
        self._leave_out()

    def _leave_out(self) -> None:
        for row in self.rows:
            row.setVisible(row.pick.model.name != self.left_out)

    def visible_rows(self) -> list[PickRow]:
        return [row for row in self.rows if not row.isHidden()]
