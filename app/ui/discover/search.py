"""Hub search: a search box, format and sort filters, and a virtualized results list with "Load more"."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.formats import EXL2, GGUF, MLX
from app.core.hub.client import HubClient
from app.core.hub.result_fit import ResultFit, result_fit
from app.core.hub.results import ModelSummary, SearchPage
from app.core.models.devices import Machine
from app.core.units import fmt_ago, fmt_bytes, fmt_count
from app.ui.tasks import TaskRunner
from app.ui.theme import VERDICTS, verdict_colours
from app.ui.widgets.message_label import MessageLabel, as_sentences
from app.ui.widgets.offline_banner import is_offline

logger = logging.getLogger(__name__)

# None: no format filter (every repo the Hub finds; opening one says what Hearth can use of it).
FORMATS: list[tuple[str, str | None]] = [("GGUF", GGUF), ("MLX", MLX), ("EXL2", EXL2), ("All formats", None)]
SORTS = [
    ("Most downloaded", "downloads"),
    ("Most liked", "likes"),
    ("Trending", "trending"),
    ("Recently updated", "updated"),
]
PAGE_SIZE = 50
# Each row's size and fit costs a repo listing and one header read: only the first page's first rows
# ask (what is on screen after a search), and each repo is asked once per machine.
FIT_ROWS = 8
SummaryRole = Qt.ItemDataRole.UserRole + 1


def summary_text(r: ModelSummary, fit: ResultFit | None = None) -> str:
    gated = " · gated" if r.gated else ""
    return (
        f"{r.id}\nby {r.author} · ↓ {fmt_count(r.downloads)} · ♥ {fmt_count(r.likes)} · "
        f"updated {fmt_ago(r.last_modified, never='unknown')}{gated}{fit_text(fit)}"
    )


def fit_text(fit: ResultFit | None) -> str:
    """The row's size and fit, on its second line (one more line would break the uniform row height)."""
    if fit is None:
        return ""
    what = f"{fit.label} " if fit.label else ""
    return f" · {what}{fmt_bytes(fit.size_bytes)}" + (f" · {fit.fit_text}" if fit.fit_text else "")


def _badge(verdict: str) -> QPixmap:
    pix = QPixmap(12, 12)
    pix.fill(verdict_colours(verdict)[0])
    return pix


def _formats(fmt: str | None) -> tuple[str, ...]:
    """The client's `formats` for one combo choice: () is one query with no format filter."""
    return (fmt,) if fmt else ()


_ROOT = QModelIndex()  # a list model has one level: its rows hang off the invisible root


class SearchResultsModel(QAbstractListModel):
    """Rows are ModelSummary objects; the view only asks for the rows on screen."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.results: list[ModelSummary] = []
        self.fits: dict[str, ResultFit] = {}  # repo id → its size and fit here, once known

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.results)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.results):
            return None
        r = self.results[index.row()]
        fit = self.fits.get(r.id)
        if role == Qt.ItemDataRole.DisplayRole:
            return summary_text(r, fit)
        if role == Qt.ItemDataRole.DecorationRole and fit is not None and fit.verdict in VERDICTS:
            return _badge(fit.verdict)
        if role == Qt.ItemDataRole.ToolTipRole:
            return ", ".join(r.tags[:12])
        if role == SummaryRole:
            return r
        return None

    def clear(self) -> None:
        self.beginResetModel()
        self.results = []
        self.fits = {}
        self.endResetModel()

    def set_fit(self, repo_id: str, fit: ResultFit) -> None:
        self.fits[repo_id] = fit
        for row, r in enumerate(self.results):
            if r.id == repo_id:
                index = self.index(row)
                self.dataChanged.emit(index, index)

    def extend(self, more: list[ModelSummary]) -> None:
        seen = {r.id for r in self.results}
        more = [r for r in more if r.id not in seen]
        if not more:
            return
        first = len(self.results)
        self.beginInsertRows(QModelIndex(), first, first + len(more) - 1)
        self.results.extend(more)
        self.endInsertRows()


class SearchPanel(QWidget):
    open_requested = Signal(str)  # repo id
    results_ready = Signal(int)  # rows now listed
    search_failed = Signal(str)  # why, as the Hub client said it (the page tells offline from the rest)

    def __init__(self, tasks: TaskRunner, hub: Callable[[], HubClient], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tasks = tasks
        self._hub = hub
        self._generation = 0  # answers to an older search are dropped
        self.searched = False  # a filter change re-runs the search only once the user has made one
        self.machine: Machine | None = None  # set_machine; without one, rows show sizes only
        self._fit_cache: dict[str, ResultFit] = {}  # repo id → its size and fit on self.machine
        self.next_token: str | None = None
        self.busy = False
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search the Hugging Face Hub (e.g. qwen, llama 8b)")
        self.query.returnPressed.connect(self.search)
        self.format = QComboBox()
        for label, value in FORMATS:
            self.format.addItem(label, value)
        self.sort = QComboBox()
        for label, value in SORTS:
            self.sort.addItem(label, value)
        # Results listed under the old filter would read as answers to the new one: search again.
        self.format.currentIndexChanged.connect(self._filter_changed)
        self.sort.currentIndexChanged.connect(self._filter_changed)
        self.go = QPushButton("Search")
        self.go.clicked.connect(self.search)
        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.format)
        top.addWidget(self.sort)
        top.addWidget(self.go)
        self.model = SearchResultsModel(self)
        self.view = QListView()
        self.view.setModel(self.model)
        self.view.setUniformItemSizes(True)  # lets the view lay out thousands of rows without measuring each
        self.view.setAlternatingRowColors(True)
        self.view.setMinimumHeight(220)
        # An empty results box before any search reads as "nothing found": say what to do instead.
        self.view.setVisible(False)
        self.hint = QLabel("Search the Hugging Face Hub, or pick a recommended model for this machine below.")
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        # One click opens a result, as a link would; Enter (activated) too. A double-click also sends
        # clicked and activated: DiscoverPage.open_repo ignores a second ask for the repo it is opening.
        self.view.clicked.connect(self._open)
        self.view.activated.connect(self._open)
        self.status = MessageLabel()  # a failure's words wrap here; a long URL in them breaks, not the page
        self.more = QPushButton("Load more")
        self.more.setVisible(False)
        self.more.clicked.connect(self.load_more)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.hint)
        layout.addWidget(self.status)
        layout.addWidget(self.view)
        layout.addWidget(self.more)

    def search(self) -> None:
        """Main thread: start a new search (the request runs on the pool)."""
        self._generation += 1
        self.searched = True
        self.hint.setVisible(False)
        self.view.setVisible(True)
        self.model.clear()
        self.next_token = None
        self.more.setVisible(False)
        text, fmt, sort = self.query.text().strip(), self.format.currentData(), self.sort.currentData()
        self.status.setText("Searching…")
        self._fetch(lambda client: client.search(text, formats=_formats(fmt), sort=sort, limit=PAGE_SIZE))

    def load_more(self) -> None:
        if self.next_token is None or self.busy:
            return
        token, fmt, sort = self.next_token, self.format.currentData(), self.sort.currentData()
        self.status.setText("Loading more…")
        self._fetch(lambda client: client.search(formats=_formats(fmt), sort=sort, limit=PAGE_SIZE, page_token=token))

    def _filter_changed(self, _index: int) -> None:
        if self.searched:
            self.search()

    def _fetch(self, call: Callable[[HubClient], SearchPage]) -> None:
        generation, hub = self._generation, self._hub
        self.busy = True
        self.more.setEnabled(False)
        self._tasks.run(
            lambda: call(hub()),
            lambda page: self._got(generation, page),
            lambda exc: self._failed(generation, exc),
            owner=self,
        )

    def _got(self, generation: int, page: SearchPage) -> None:
        if generation != self._generation:
            return
        self.busy = False
        first_page = self.model.rowCount() == 0
        self.model.extend(page.results)
        if first_page:
            self._ask_fits(generation, [r.id for r in self.model.results[:FIT_ROWS]])
        self.next_token = page.next
        self.more.setVisible(page.next is not None)
        self.more.setEnabled(True)
        n = self.model.rowCount()
        self.status.setText(
            f"{n} model{'s' if n != 1 else ''}" + (" (more available)" if page.next else "")
            if n
            else "No models match. Try other words or another format."
        )
        self.results_ready.emit(n)

    def set_machine(self, machine: Machine | None) -> None:
        """Main thread: fits are this machine's from now on (the cache held another machine's)."""
        self.machine = machine
        self._fit_cache = {}

    def _ask_fits(self, generation: int, repo_ids: list[str]) -> None:
        """Each row's size and fit, fetched on the pool one repo at a time; from the cache when this
        machine already asked."""
        for repo_id in repo_ids:
            if repo_id in self._fit_cache:
                self.model.set_fit(repo_id, self._fit_cache[repo_id])
            else:
                self._ask_fit(generation, repo_id)

    def _ask_fit(self, generation: int, repo_id: str) -> None:
        machine, hub, cache = self.machine, self._hub, self._fit_cache

        def got(fit: ResultFit) -> None:
            cache[repo_id] = fit  # the cache of the machine it was asked for, even if it changed since
            if generation == self._generation:
                self.model.set_fit(repo_id, fit)

        def failed(exc: BaseException) -> None:
            logger.info("size and fit of %s: %s", repo_id, exc)  # the row just shows no size

        self._tasks.run(lambda: result_fit(hub(), repo_id, machine), got, failed, owner=self)

    def _failed(self, generation: int, exc: BaseException) -> None:
        if generation != self._generation:
            return
        self.busy = False
        self.more.setEnabled(True)
        # An empty results box under a failed search reads as "nothing found": only rows already listed stay.
        self.view.setVisible(self.model.rowCount() > 0)
        offline = is_offline(exc)  # the page's banner says the Hub is out of reach; here, what that means
        self.status.setText("Search needs a connection to Hugging Face." if offline else as_sentences(str(exc)))
        self.search_failed.emit(str(exc))

    def _open(self, index: QModelIndex) -> None:
        r = self.model.data(index, SummaryRole)
        if r is not None:
            self.open_requested.emit(r.id)

    def open_row(self, row: int) -> None:
        self._open(self.model.index(row))
