"""The Downloads panel: one row per download with progress, speed, ETA, state and the controls that apply."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.downloads.items import UNFINISHED, DownloadItem, Progress, State
from app.core.downloads.manager import DownloadManager
from app.core.hub.client import HubClient
from app.core.units import fmt_bytes, fmt_eta
from app.ui.bridge import EventBridge
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

STATE_TEXT = {
    State.QUEUED: "Waiting for a free slot",
    State.ACTIVE: "Downloading",
    State.PAUSED: "Paused",
    State.FAILED: "Failed",
    State.VERIFYING: "Verifying",
    State.DONE: "Done — verified and in My Models",
}


class DownloadRow(QFrame):
    """One download. Buttons call back into the panel, which runs the manager call off the UI thread."""

    def __init__(self, item: DownloadItem, act: Callable[[str, str], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.item_id = item.id
        self.title = QLabel(f"{item.repo_id} · {item.label}")
        self.title.setObjectName("cardTitle")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bytes = QLabel()
        self.rate = QLabel()
        self.eta = QLabel()
        self.state = QLabel()
        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        for action, text in (
            ("pause", "Pause"),
            ("resume", "Resume"),
            ("retry", "Retry"),
            ("cancel", "Cancel"),
            ("clear", "Remove from list"),
        ):
            button = QPushButton(text)
            button.clicked.connect(lambda _=False, a=action: act(a, self.item_id))
            self.buttons[action] = button
            row.addWidget(button)
        row.addStretch(1)
        grid = QGridLayout(self)
        grid.addWidget(self.title, 0, 0, 1, 4)
        grid.addWidget(self.bar, 1, 0, 1, 4)
        grid.addWidget(self.bytes, 2, 0)
        grid.addWidget(self.rate, 2, 1)
        grid.addWidget(self.eta, 2, 2)
        grid.addWidget(self.state, 2, 3)
        grid.addWidget(self.error, 3, 0, 1, 4)
        grid.addLayout(row, 4, 0, 1, 4)
        self.update_item(item)

    def update_item(self, item: DownloadItem) -> None:
        self.item_state = item.state
        self.state.setText(STATE_TEXT[item.state])
        self.error.setText(item.error)
        self.error.setVisible(bool(item.error))
        self._set_bytes(item.bytes_done, item.total)
        if item.state not in (State.ACTIVE, State.VERIFYING):
            self.rate.setText("")
            self.eta.setText("")
        visible = {
            "pause": item.state in (State.QUEUED, State.ACTIVE, State.VERIFYING),
            "resume": item.state == State.PAUSED,
            "retry": item.state == State.FAILED,
            "cancel": item.state != State.DONE,
            "clear": item.state == State.DONE,
        }
        for action, button in self.buttons.items():
            button.setVisible(visible[action])

    def update_progress(self, p: Progress) -> None:
        if self.item_state not in (State.ACTIVE, State.VERIFYING):
            return
        self._set_bytes(p.done, p.total)
        self.rate.setText(f"{fmt_bytes(p.rate)}/s" if p.rate > 0 else "")
        self.eta.setText(fmt_eta(p.eta))

    def _set_bytes(self, done: int, total: int) -> None:
        self.bar.setValue(int(1000 * done / total) if total else 0)
        self.bytes.setText(f"{fmt_bytes(done)} of {fmt_bytes(total)}" if total else fmt_bytes(done))

    def text(self) -> str:
        return "\n".join(w.text() for w in (self.title, self.bytes, self.rate, self.eta, self.state, self.error))


class DownloadsPanel(QWidget):
    """Shows the manager's queue. Manager events arrive on worker threads; the bridges bring them here."""

    download_queued = Signal(str)  # item id, after `request_download` added it
    request_failed = Signal(str)  # plain words: why a requested download could not start
    active_count_changed = Signal(int)  # downloads in progress (queued, downloading or verifying)
    # For feedback beside the Download that was clicked (app.ui.download_button), keyed by the variant:
    download_preparing = Signal(object)  # Variant, as `request_download` starts resolving it
    request_finished = Signal(object, str)  # Variant and why it could not start ("" once queued)

    def __init__(
        self,
        manager: DownloadManager,
        tasks: TaskRunner,
        *,
        hub: Callable[[], HubClient],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.manager = manager
        self._tasks = tasks
        self._hub = hub  # a client for the current Settings (token and mirror can change while Hearth runs)
        self.rows: dict[str, DownloadRow] = {}
        self.active_count = 0
        title = QLabel("Downloads")
        title.setObjectName("pageTitle")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setVisible(False)  # an empty line would push the list down
        self.empty = QLabel("No downloads. Find a model in Discover and press Download.")
        body = QWidget()
        self._list = QVBoxLayout(body)
        self._list.addWidget(self.empty)
        self._list.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.status)
        layout.addWidget(scroll, 1)

        self._changed = EventBridge(manager.changed, self)
        self._changed.fired.connect(self._on_changed)
        self._removed = EventBridge(manager.removed, self)
        self._removed.fired.connect(self._on_removed)
        self._progress = EventBridge(manager.progress, self, coalesce_key=lambda p: p.item_id)
        self._progress.fired.connect(self._on_progress)
        for item in manager.items():  # in memory: no disk or network here
            self._on_changed(item)

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))

    # ---- requests ----

    def request_download(self, assessment) -> None:
        """Main thread: resolve the variant's files on the pool, then queue it (`Assessment` or `Variant`)."""
        from app.core.downloads.resolve import queue_download, resolve_download

        variant = getattr(assessment, "variant", assessment)
        self._say(f"Preparing {variant.repo_id} {variant.label}…")
        hub, manager = self._hub, self.manager

        def op() -> str:
            return queue_download(manager, resolve_download(hub(), variant))

        self.download_preparing.emit(variant)
        self._tasks.run(op, lambda i: self._queued(variant, i), lambda e: self._request_failed(variant, e), owner=self)

    def _queued(self, variant, item_id: str) -> None:
        self._say("")
        self.download_queued.emit(item_id)
        self.request_finished.emit(variant, "")

    def _request_failed(self, variant, exc: BaseException) -> None:
        logger.info("download request failed: %s", exc)
        self._say(f"Could not start the download: {exc}")
        self.request_failed.emit(str(exc))
        self.request_finished.emit(variant, str(exc))

    def act(self, action: str, item_id: str) -> None:
        """Pause, resume, retry, cancel or clear; the manager saves state to disk, so it runs on the pool."""
        m = self.manager
        call = {"pause": m.pause, "resume": m.resume, "retry": m.resume, "cancel": m.cancel, "clear": m.cancel}[action]
        row = self.rows.get(item_id)
        if row is not None:
            for button in row.buttons.values():
                button.setEnabled(False)
        self._tasks.run(lambda: call(item_id), lambda _: self._enable(item_id), self._failed, owner=self)

    def _enable(self, item_id: str) -> None:
        row = self.rows.get(item_id)
        if row is not None:
            for button in row.buttons.values():
                button.setEnabled(True)

    def _failed(self, exc: BaseException) -> None:
        logger.error("download control failed", exc_info=exc)
        self._say(f"That did not work: {exc}")

    # ---- events (main thread) ----

    def _on_changed(self, item: DownloadItem) -> None:
        row = self.rows.get(item.id)
        if row is None:
            if item.id not in {i.id for i in self.manager.items()}:
                return  # changed arrived after removed
            row = DownloadRow(item, self.act)
            self.rows[item.id] = row
            self._list.insertWidget(self._list.count() - 1, row)
        row.update_item(item)
        self.empty.setVisible(not self.rows)
        self._recount()

    def _on_removed(self, item_id: str) -> None:
        row = self.rows.pop(item_id, None)
        if row is not None:
            self._list.removeWidget(row)
            row.deleteLater()
        self.empty.setVisible(not self.rows)
        self._recount()

    def _recount(self) -> None:
        # Paused and failed ones wait for the user, done ones are finished: only the rest are "in progress".
        n = sum(row.item_state in UNFINISHED for row in self.rows.values())
        if n != self.active_count:
            self.active_count = n
            self.active_count_changed.emit(n)

    def sidebar_label(self) -> str:
        """The sidebar entry: how many downloads are in progress, so they show from any page."""
        return f"Downloads ({self.active_count})" if self.active_count else "Downloads"

    def _on_progress(self, p: Progress) -> None:
        row = self.rows.get(p.item_id)
        if row is not None:
            row.update_progress(p)

    def row(self, item_id: str) -> DownloadRow:
        return self.rows[item_id]
