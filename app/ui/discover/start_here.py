"""'Start here' on Discover while My Models has no ready model: the top pick for this machine, one click away.

It shows as soon as the library is read, with a placeholder of the same height until the ranking answers
(so the search box below never jumps). It hides once the library has a ready model, except for the model it
started itself, which stays until its "Downloaded — Chat" is used (so the click that finishes the first-run
path is where the user looks)."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QWidget

from app.core.models.catalog import CatalogPick
from app.core.units import fmt_bytes
from app.ui.download_button import DownloadButton, DownloadFeed
from app.ui.theme import set_status
from app.ui.widgets.fit_view import fmt_rate
from app.ui.widgets.message_label import MessageLabel
from app.ui.widgets.slow_speed import is_slow, slow_text, slow_why

logger = logging.getLogger(__name__)


WAITING_NAME = "Finding the best model for this machine…"
WAITING_DETAIL = "Hearth is reading this machine's memory and speed to pick a model that runs well on it."
NONE_RUNS = "No catalogue model runs on this machine; search the Hub below for a smaller one."


class StartHereCard(QFrame):
    download_requested = Signal(object)  # Assessment
    pick_shown = Signal(object)  # the CatalogPick the card offers now, None when it offers none

    def __init__(self, page: Any = None, parent: QWidget | None = None) -> None:
        """`page`, when given, is the Discover page: its picks fill the card, its Download goes the page's way."""
        super().__init__(parent)
        self.setObjectName("card")
        self.pick: CatalogPick | None = None
        self.feed: DownloadFeed | None = None
        self.started = False  # the user downloaded the pick from here
        self.used = False  # ... and then opened it in Chat from here
        self.ranked = False  # the picks have come (until then the card is a placeholder)
        self._shown: CatalogPick | None = None
        self.title = QLabel("Start here")
        self.title.setObjectName("cardTitle")
        self.slow = QLabel()  # a pick that would write slower than people read says so
        set_status(self.slow, "warning")
        self.slow.setVisible(False)
        self.name = MessageLabel(WAITING_NAME)
        # Two lines kept from the start: the placeholder's text and the pick's are then the same height.
        self.detail = MessageLabel(WAITING_DETAIL, min_lines=2)
        self.error = MessageLabel()  # a failed download's whole message, wrapped across the card
        set_status(self.error, "error")
        self.error.setVisible(False)
        self.button = self._new_button(None)
        grid = QGridLayout(self)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.slow, 0, 1, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.name, 1, 0)
        grid.addWidget(self.detail, 2, 0)
        grid.addWidget(self.button, 1, 1, 2, 1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        grid.addWidget(self.error, 3, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        self.setVisible(False)
        if page is not None:
            page.picks_ready.connect(self.set_picks)
            self.download_requested.connect(page.download_requested.emit)

    def set_feed(self, feed: DownloadFeed | None) -> None:
        if feed is not None and feed is not self.feed:
            feed.updated.connect(self._update_visibility)
        self.feed = feed
        self.button.set_feed(feed)
        self._update_visibility()

    def _new_button(self, best: Any) -> DownloadButton:
        # The card shows a failure across its width (self.error), not squeezed beside the button.
        button = DownloadButton(best, self.feed, can_download=best is not None, inline_note=False)
        button.download_requested.connect(self._download)
        button.button.clicked.connect(self._maybe_used)
        button.changed.connect(self._show_error)
        return button

    def set_picks(self, picks: list[CatalogPick]) -> None:
        """The first pick the recommender ranks best for this machine (one that runs here)."""
        self.ranked = True
        self.pick = next((p for p in picks if p.best is not None), None)
        best = self.pick.best if self.pick is not None else None
        rate = best.speed.decode_tok_s if best is not None and best.speed else None
        if self.pick is not None and best is not None:
            self.name.setText(f"{self.pick.model.name} · {best.variant.label}")
            fit = best.plan.label if best.plan is not None else ""
            speed = f"≈ {fmt_rate(rate)} tok/s" if rate else ""
            parts = [fit, speed, fmt_bytes(best.variant.size_bytes)]
            self.detail.setText("The best model for this machine: " + " · ".join(p for p in parts if p))
        else:
            self.name.setText("Nothing in the catalogue fits")
            self.detail.setText(NONE_RUNS)
        slow = rate is not None and is_slow(rate)
        self.slow.setText(slow_text(rate) if slow and rate else "")
        self.slow.setToolTip(slow_why(rate) if slow and rate else "")
        self.slow.setVisible(slow)
        old = self.button
        self.button = self._new_button(best)
        self.button.set_primary(not slow)
        layout = self.layout()
        assert isinstance(layout, QGridLayout)
        layout.replaceWidget(old, self.button)
        old.deleteLater()
        self._show_error()
        self._update_visibility()

    def _show_error(self) -> None:
        text = self.button.error_text()
        self.error.setText(text)
        self.error.setVisible(bool(text))

    def _download(self, assessment: object) -> None:
        self.started = True
        self.download_requested.emit(assessment)

    def _maybe_used(self) -> None:
        # Runs after the button's own handler: a click on "Downloaded — Chat" finishes what this card is for.
        if self.started and self.button.view.action == "chat":
            self.used = True
            self._update_visibility()

    def should_show(self) -> bool:
        feed = self.feed
        if feed is None or not feed.models_loaded or self.used:
            return False
        if not feed.has_ready_model:
            return True  # the pick, or its placeholder until the ranking answers
        best = self.pick.best if self.pick is not None else None
        if not self.started or best is None:
            return False
        # Asked of the feed, not the button: the button may not have taken in this update yet.
        return feed.state(best.variant)[0].action == "chat"  # its own download done, its Chat not yet used

    def _update_visibility(self) -> None:
        visible = self.should_show()
        self.setVisible(visible)
        shown = self.pick if visible else None
        if shown is not self._shown:
            self._shown = shown
            self.pick_shown.emit(shown)
