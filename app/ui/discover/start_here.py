"""'Start here' on Discover while My Models has no ready model: the top pick for this machine, one click away.

It hides once the library has a ready model, except for the model it started itself, which stays until
its "Downloaded — Chat" is used (so the click that finishes the first-run path is where the user looks)."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QWidget

from app.core.models.catalog import CatalogPick
from app.core.units import fmt_bytes
from app.ui.download_button import DownloadButton, DownloadFeed
from app.ui.widgets.fit_view import fmt_rate

logger = logging.getLogger(__name__)


class StartHereCard(QFrame):
    download_requested = Signal(object)  # Assessment

    def __init__(self, page: Any = None, parent: QWidget | None = None) -> None:
        """`page`, when given, is the Discover page: its picks fill the card, its Download goes the page's way."""
        super().__init__(parent)
        self.setObjectName("card")
        self.pick: CatalogPick | None = None
        self.feed: DownloadFeed | None = None
        self.started = False  # the user downloaded the pick from here
        self.used = False  # ... and then opened it in Chat from here
        self.title = QLabel("Start here")
        self.title.setObjectName("cardTitle")
        self.name = QLabel()
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        self.button = DownloadButton(None, can_download=False)
        self.button.download_requested.connect(self._download)
        self.button.button.clicked.connect(self._maybe_used)
        grid = QGridLayout(self)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.name, 1, 0)
        grid.addWidget(self.detail, 2, 0)
        grid.addWidget(self.button, 1, 1, 2, 1)
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

    def set_picks(self, picks: list[CatalogPick]) -> None:
        """The first pick the recommender ranks best for this machine (one that runs here)."""
        self.pick = next((p for p in picks if p.best is not None), None)
        best = self.pick.best if self.pick is not None else None
        if self.pick is not None and best is not None:
            self.name.setText(f"{self.pick.model.name} · {best.variant.label}")
            fit = best.plan.label if best.plan is not None else ""
            speed = f"≈ {fmt_rate(best.speed.decode_tok_s)} tok/s" if best.speed else ""
            parts = [fit, speed, fmt_bytes(best.variant.size_bytes)]
            self.detail.setText("The best model for this machine: " + " · ".join(p for p in parts if p))
        old = self.button
        self.button = DownloadButton(best, self.feed, can_download=best is not None)
        self.button.download_requested.connect(self._download)
        self.button.button.clicked.connect(self._maybe_used)
        layout = self.layout()
        assert isinstance(layout, QGridLayout)
        layout.replaceWidget(old, self.button)
        old.deleteLater()
        self._update_visibility()

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
        if feed is None or not feed.models_loaded or self.pick is None or self.used:
            return False
        if not feed.has_ready_model:
            return True
        best = self.pick.best
        if not self.started or best is None:
            return False
        # Asked of the feed, not the button: the button may not have taken in this update yet.
        return feed.state(best.variant)[0].action == "chat"  # its own download done, its Chat not yet used

    def _update_visibility(self) -> None:
        self.setVisible(self.should_show())
