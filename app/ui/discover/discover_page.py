"""The Discover page: recommended models first, then Hub search; a model's variants on a second view."""

from __future__ import annotations

import logging
from typing import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QStackedWidget, QVBoxLayout, QWidget

from app.core.hardware.profile import HardwareProfile
from app.core.hub.catalog import CatalogPick, ranked_catalog
from app.core.models.devices import Machine, machine_from_profile
from app.ui.discover.model_view import ModelView
from app.ui.discover.recommended import RecommendedList
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)

Ranker = Callable[[Machine], list[CatalogPick]]


class DiscoverPage(QWidget):
    picks_ready = Signal(list)  # list[CatalogPick], on the main thread
    download_requested = Signal(object)  # app.core.models.recommend.Assessment

    def __init__(self, tasks: TaskRunner, *, ranker: Ranker = ranked_catalog, parent: QWidget | None = None):
        super().__init__(parent)
        self._tasks = tasks
        self._ranker = ranker
        self.machine: Machine | None = None
        self.picks: list[CatalogPick] = []

        title = QLabel("Discover")
        title.setObjectName("pageTitle")
        subtitle = QLabel("Recommended for this machine")
        subtitle.setObjectName("cardTitle")
        self.recommended = RecommendedList()
        self.recommended.open_requested.connect(self.open_pick)
        self.recommended.download_requested.connect(self._download_pick)
        home = QWidget()
        home_layout = QVBoxLayout(home)
        home_layout.addWidget(title)
        home_layout.addWidget(subtitle)
        home_layout.addWidget(self.recommended)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(home)

        self.model_view = ModelView()
        self.model_view.back.connect(lambda: self.stack.setCurrentIndex(0))
        self.model_view.download_requested.connect(self.download_requested.emit)
        self.stack = QStackedWidget()
        self.stack.addWidget(scroll)
        self.stack.addWidget(self.model_view)
        layout = QVBoxLayout(self)
        layout.addWidget(self.stack)

    def set_profile(self, profile: HardwareProfile) -> None:
        """Main thread: re-rank for a new hardware profile (the ranking runs on the pool)."""
        machine = machine_from_profile(profile)
        self.machine = machine
        self._tasks.run(lambda: self._ranker(machine), self._on_picks, self._on_error, owner=self)

    def _on_picks(self, picks: list[CatalogPick]) -> None:
        self.picks = picks
        self.recommended.set_picks(picks)
        self.picks_ready.emit(picks)

    def _on_error(self, exc: BaseException) -> None:
        logger.error("ranking the catalogue failed", exc_info=exc)
        self.recommended.status.setText(f"Could not rank models: {exc}")

    def open_pick(self, pick: CatalogPick) -> None:
        m = pick.model
        self.model_view.show_model(m.name, f"{m.family} · licence {m.license} · sizes estimated until the Hub "
                                            "is asked", pick.recommendation, self.machine)
        self.stack.setCurrentIndex(1)

    def _download_pick(self, pick: CatalogPick) -> None:
        if pick.best is not None:
            self.download_requested.emit(pick.best)
