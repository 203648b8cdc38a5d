"""The Discover page: recommended models first, then Hub search; a model's variants on a second view."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QDialog, QLabel, QScrollArea, QStackedWidget, QVBoxLayout, QWidget

from app.core.hardware.profile import HardwareProfile
from app.core.hub.client import HubClient
from app.core.hub.repo_page import HubModel, load_hub_model, with_hub_variants
from app.core.models.catalog import CatalogPick, ranked_catalog, ranking_note
from app.core.models.devices import Machine, machine_from_profile
from app.core.models.recommend import Variant
from app.core.units import fmt_bytes
from app.ui.discover.model_view import ModelView
from app.ui.discover.recommended import RecommendedList
from app.ui.discover.search import SearchPanel
from app.ui.discover.start_here import StartHereCard
from app.ui.download_button import DownloadFeed
from app.ui.tasks import TaskRunner
from app.ui.widgets.message_label import as_sentences
from app.ui.widgets.offline_banner import OfflineBanner, is_offline

logger = logging.getLogger(__name__)

Ranker = Callable[[Machine], list[CatalogPick]]


class DiscoverPage(QWidget):
    picks_ready = Signal(list)  # list[CatalogPick], on the main thread
    download_requested = Signal(object)  # app.core.models.recommend.Assessment
    repo_ready = Signal(object)  # HubModel, once a Hub repo's page is shown
    repo_failed = Signal(str)  # why a Hub repo could not be opened (as shown: sentences)

    def __init__(
        self,
        tasks: TaskRunner,
        *,
        hub: Callable[[], HubClient],
        ranker: Ranker = ranked_catalog,
        add_remote: Callable[[str], None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`add_remote(url)`: add a planned server as a remote once it runs (None: the plan cannot offer it)."""
        super().__init__(parent)
        self._tasks = tasks
        self.add_remote = add_remote
        self._ranker = ranker
        self._hub = hub  # a client for the current Settings (token and mirror can change while Hearth runs)
        self._opening = 0  # only the last repo asked for is shown
        self._loading: str | None = None  # the repo whose page is being fetched now
        self.feed: DownloadFeed | None = None
        self.machine: Machine | None = None
        self.picks: list[CatalogPick] = []
        self._memory_note = ""  # what the ranking counted on (at_rest_note)

        title = QLabel("Discover")
        title.setObjectName("pageTitle")
        subtitle = QLabel("Recommended for this machine")
        subtitle.setObjectName("cardTitle")
        self.recommended = RecommendedList()
        self.recommended.open_requested.connect(self.open_pick)
        self.recommended.download_requested.connect(self._download_pick)
        self.search = SearchPanel(tasks, self._hub)
        self.search.open_requested.connect(self.open_repo)
        self.search.search_failed.connect(self._search_failed)
        self.search.results_ready.connect(lambda _n: self.set_offline(False))
        # Said once for the page (search, model pages, every Download), with one Retry.
        self.offline_banner = OfflineBanner()
        self.offline_banner.retry_requested.connect(self.check_hub)
        search_title = QLabel("Search the Hub")
        search_title.setObjectName("cardTitle")
        home = QWidget()
        home_layout = QVBoxLayout(home)
        home_layout.addWidget(title)
        home_layout.addWidget(start_here := StartHereCard(self))  # hidden unless My Models has no ready model
        start_here.pick_shown.connect(self.recommended.leave_out)  # its pick is not listed again below
        home_layout.addWidget(search_title)
        home_layout.addWidget(self.search)
        home_layout.addWidget(subtitle)
        home_layout.addWidget(self.recommended)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        # The list below always outgrows the window once ranked: a scroll bar that appeared then would
        # narrow everything above it, a sideways jump on the first view.
        scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        scroll.setWidget(home)

        self.stack = QStackedWidget()
        self.model_view = ModelView()
        self.model_view.back.connect(lambda: self.stack.setCurrentIndex(0))
        self.model_view.back.connect(self.search.query.setFocus)
        self.model_view.download_requested.connect(self.download_requested.emit)
        self.model_view.plan_requested.connect(self.plan_server)
        self.plan_dialog: QDialog | None = None
        self.stack.addWidget(scroll)
        self.stack.addWidget(self.model_view)
        layout = QVBoxLayout(self)
        layout.addWidget(self.offline_banner)
        layout.addWidget(self.stack)
        self.start_here = start_here

    def set_feed(self, feed: DownloadFeed | None) -> None:
        """Main thread: Download buttons show their download's progress and the library's copy (DownloadFeed)."""
        if feed is not None and feed is not self.feed:
            feed.offline_changed.connect(self.set_offline)
        self.feed = feed
        for w in (self.recommended, self.model_view.table, self.start_here):
            w.set_feed(feed)

    def set_offline(self, offline: bool) -> None:
        """Main thread: show or hide the offline banner (a Hub call could not reach it, or one got through);
        the Download buttons are off while it shows, and say why."""
        self.offline_banner.set_checking(False)
        self.offline_banner.setVisible(offline)
        if self.feed is not None:
            self.feed.set_offline(offline)

    def _search_failed(self, why: str) -> None:
        if is_offline(why):
            self.set_offline(True)

    def check_hub(self) -> None:
        """Main thread: at start (main.py) and the banner's Retry. Ask the Hub for one search result on the
        pool; out of reach, the banner shows at once and Download waits; once it answers, the buttons that
        failed for want of it offer Download again and a failed search runs again."""
        hub = self._hub
        self._tasks.run(lambda: hub().search(limit=1), lambda _page: self._hub_back(), self._hub_still_gone, owner=self)

    def _hub_back(self) -> None:
        self.set_offline(False)
        if self.feed is not None:
            self.feed.clear_offline()
        if self.search.searched and self.search.model.rowCount() == 0:
            self.search.search()

    def _hub_still_gone(self, exc: BaseException) -> None:
        logger.info("the Hub is still out of reach: %s", exc)
        self.set_offline(is_offline(exc))

    def set_profile(self, profile: HardwareProfile) -> None:
        """Main thread: re-rank for a new hardware profile (the ranking runs on the pool). The catalogue is
        ranked against the machine at rest (all its memory), so "N of M run on this machine" says what it
        can run and stays the same from one launch to the next; a model's own page and the Hub's search
        plan against the memory free now."""
        machine = machine_from_profile(profile)
        self.machine = machine
        self._memory_note = at_rest_note(profile)
        self.search.set_machine(machine)
        rested = machine_from_profile(profile.at_rest())
        self._tasks.run(lambda: self._ranker(rested), self._on_picks, self._on_error, owner=self)

    def _on_picks(self, picks: list[CatalogPick]) -> None:
        self.picks = picks
        self.recommended.set_picks(picks)
        # The list's own line counts the fits; say what the order means too (the core's rule).
        self.recommended.status.setWordWrap(True)
        self.recommended.status.setText(ranking_note(picks) + self._memory_note)
        self.picks_ready.emit(picks)

    def _on_error(self, exc: BaseException) -> None:
        logger.error("ranking the catalogue failed", exc_info=exc)
        self.recommended.status.setText(f"Could not rank models: {exc}")

    def plan_server(self, repo_id: str) -> None:
        """Main thread: the deployment plan dialog for a repo that does not fit here (its shape from the
        Hub, on the pool)."""
        from app.core.deploy.shape import shape_from_hub
        from app.ui.discover.plan_dialog import PlanDialog

        hub = self._hub
        dialog = PlanDialog(
            repo_id, lambda: shape_from_hub(hub(), repo_id), self._tasks, parent=self, add_remote=self.add_remote
        )
        dialog.setModal(False)
        self.plan_dialog = dialog
        dialog.show()

    def open_pick(self, pick: CatalogPick) -> None:
        """Main thread: the catalogue's estimates at once, then the pick's repo asked on the pool (real
        sizes, the card, a link), as a Hub search result is; the estimates stay if the Hub cannot answer."""
        m = pick.model
        self._opening += 1
        self._loading = None
        ticket, machine, hub = self._opening, self.machine, self._hub
        self.model_view.show_model(
            m.name,
            f"{m.family} · licence {m.license} · sizes estimated until the Hub is asked",
            pick.recommendation,
            self.machine,
        )
        self._show_details()
        repo_id = next((v.repo_id for v in _repo_order(pick) if v.repo_id), None)
        if repo_id is None:
            return
        self.model_view.subtitle.setText(f"{m.family} · licence {m.license} · sizes estimated; asking the Hub…")
        self._tasks.run(
            lambda: load_hub_model(hub(), repo_id, machine),
            lambda hm: self._show_pick_repo(ticket, pick, hm),
            lambda e: self._pick_offline(ticket, pick, e),
            owner=self,
        )

    def _show_pick_repo(self, ticket: int, pick: CatalogPick, hm: HubModel) -> None:
        if ticket != self._opening:
            return
        m = pick.model
        rec = with_hub_variants([a.variant for a in pick.recommendation.assessments], hm)
        self.model_view.show_model(m.name, f"{m.family} · licence {m.license} · {hm.subtitle}", rec, hm.machine)
        self.set_offline(False)
        if hm.access_needed:
            self.model_view.show_access_needed(hm.repo_id, hm.page_url)
        else:
            self.model_view.show_notice(hm.notice)
        self.model_view.show_card(hm.card)
        self.model_view.show_source(hm.repo_id, hm.page_url)
        self.repo_ready.emit(hm)

    def _pick_offline(self, ticket: int, pick: CatalogPick, exc: BaseException) -> None:
        if ticket != self._opening:
            return
        m = pick.model
        logger.info("asking the Hub about %s failed: %s", m.name, exc)
        self.model_view.subtitle.setText(f"{m.family} · licence {m.license} · sizes estimated")
        estimates = "The sizes and fit shown are estimates from Hearth's catalogue."
        offline = is_offline(exc)
        why = "" if offline else as_sentences(str(exc)) + " "  # offline: the banner above says so
        self.set_offline(offline)
        self.model_view.show_notice(why + estimates)
        self.repo_failed.emit(as_sentences(str(exc)))

    def _show_details(self) -> None:
        self.stack.setCurrentIndex(1)
        # The button that opened the details is now hidden: put the focus in the view, so its Esc and
        # Alt+Left work straight away and the keyboard user is not left nowhere.
        self.model_view.back_button.setFocus()

    def open_repo(self, repo_id: str) -> None:
        """Main thread: open a Hub repo's page; its card and variants are fetched on the pool."""
        if repo_id == self._loading:  # a double-click asks twice (clicked, then activated): fetch once
            self._show_details()
            return
        self._loading = repo_id
        self._opening += 1
        ticket, machine, hub = self._opening, self.machine, self._hub
        self.model_view.title.setText(repo_id)
        self.model_view.subtitle.setText("Reading the model's files from the Hub…")
        self.model_view.why.setText("")
        self.model_view.show_notice("")
        self.model_view.show_source("", "")
        self.model_view.table.set_assessments([])
        self.model_view.card.setVisible(False)
        self._show_details()
        self._tasks.run(
            lambda: load_hub_model(hub(), repo_id, machine),
            lambda m: self._show_repo(ticket, m),
            lambda e: self._repo_error(ticket, repo_id, e),
            owner=self,
        )

    def _show_repo(self, ticket: int, m: HubModel) -> None:
        if ticket != self._opening:
            return
        self._loading = None
        self.model_view.show_model(m.repo_id, m.subtitle, m.recommendation, m.machine)
        self.set_offline(False)
        if m.access_needed:
            self.model_view.show_access_needed(m.repo_id, m.page_url)
        else:
            self.model_view.show_notice(m.notice)
        self.model_view.show_card(m.card)
        self.model_view.show_source(m.repo_id, m.page_url)
        self.repo_ready.emit(m)

    def _repo_error(self, ticket: int, repo_id: str, exc: BaseException) -> None:
        if ticket != self._opening:
            return
        self._loading = None
        logger.info("opening %s failed: %s", repo_id, exc)
        self.model_view.subtitle.setText("")
        why = as_sentences(str(exc))
        if is_offline(exc):  # the banner says why; here, what it means for this page
            self.set_offline(True)
            why = "This model's files are on Hugging Face: open it again once Hearth is back online."
        self.model_view.show_notice(why)
        self.repo_failed.emit(why)

    def _download_pick(self, pick: CatalogPick) -> None:
        if pick.best is not None:
            self.download_requested.emit(pick.best)


def at_rest_note(profile: HardwareProfile) -> str:
    """Why the count of models that run here does not move with free memory, in a sentence."""
    mem = profile.memory
    if not mem.total_bytes:
        return ""
    gpus = [g for g in profile.gpus if not g.integrated and g.memory_total_bytes]
    vram = f" and {fmt_bytes(sum(g.memory_total_bytes for g in gpus))} of VRAM" if gpus else ""
    return (
        f" Counted on this machine's {fmt_bytes(mem.total_bytes)} of RAM{vram} with nothing else running"
        f" ({fmt_bytes(mem.available_bytes)} is free now), so it does not change from day to day; a model's"
        " page says whether it fits now."
    )


def _repo_order(pick: CatalogPick) -> list[Variant]:
    """The pick's variants, the recommended one first: its repo is the one to ask the Hub about."""
    best = pick.best
    rest = [a.variant for a in pick.recommendation.assessments if a is not best]
    return ([best.variant] if best else []) + rest
