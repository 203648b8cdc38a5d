"""Download feedback where the user clicked: a shared feed of download and library state, and the button
that shows it for one variant (progress, "Downloaded — Chat", an error with Retry, "In My Models — Chat").

The feed listens to the core through EventBridges (manager and library events arrive on worker threads);
the library is read on the pool. Buttons only read the feed's in-memory state on the main thread."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

from app.core.downloads.items import DownloadItem, Progress, State
from app.core.downloads.paths import repo_folder
from app.core.formats import GGUF
from app.core.library import Library, LocalModel
from app.core.library.download_view import ButtonView, button_view
from app.core.models.recommend import Variant
from app.ui.bridge import EventBridge
from app.ui.downloads_panel import DownloadsPanel
from app.ui.tasks import TaskRunner
from app.ui.theme import restyle_by, set_status
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.message_label import as_sentences, capitalised
from app.ui.widgets.offline_banner import is_offline

logger = logging.getLogger(__name__)

Key = tuple[str, str, str]
NOTE_CHARS = 24  # the width of a failure's short words beside a button, in average characters
OFFLINE_NOTE = "Failed: offline"  # a download that failed for want of the Hub, beside its Retry


def variant_key(v: Variant) -> Key:
    """The identity the manager reuses a download by (see resolve.queue_download): repo, revision, label."""
    return (v.repo_id or "", v.revision or "main", v.label.lower())


def item_key(item: DownloadItem) -> Key:
    return (item.repo_id, item.revision or "main", item.label.lower())


class DownloadFeed(QObject):
    """What every Download button needs to know, kept on the main thread; `updated` when any of it changes."""

    updated = Signal()
    chat_requested = Signal(object)  # LocalModel: main.py hands it to the ChatLauncher
    offline_changed = Signal(bool)  # a download request found the Hub unreachable (True), or one got through

    def __init__(self, panel: DownloadsPanel, library: Library, tasks: TaskRunner, parent: QObject | None = None):
        super().__init__(parent)
        self._panel = panel
        self._library = library
        self._tasks = tasks
        self.models_dir = Path(panel.manager.models_dir)
        self.items: dict[str, DownloadItem] = {i.id: i for i in panel.manager.items()}  # in memory
        self.progress: dict[str, Progress] = {}
        self.preparing: set[Key] = set()
        self.request_errors: dict[Key, str] = {}
        self.offline = False  # the last download request could not reach the Hub at all
        # Items seen finishing while Hearth runs: until the library lists them they read "adding…";
        # a done item from an earlier run whose model was deleted since offers Download again instead.
        self.finished_here: set[str] = set()
        self.models: list[LocalModel] = []
        self.models_loaded = False
        self._changed = EventBridge(panel.manager.changed, self)
        self._changed.fired.connect(self._on_item)
        self._removed = EventBridge(panel.manager.removed, self)
        self._removed.fired.connect(self._on_removed)
        self._progress = EventBridge(panel.manager.progress, self, coalesce_key=lambda p: p.item_id)
        self._progress.fired.connect(self._on_progress)
        self._library_changed = EventBridge(library.changed, self, coalesce_key=lambda _: None)
        self._library_changed.fired.connect(lambda _id: self.reload_models())
        panel.download_preparing.connect(self._on_preparing)
        panel.request_finished.connect(self._on_request_finished)
        self.reload_models()

    # ---- state (main thread) ----

    def reload_models(self) -> None:
        """The library is SQLite on disk: read it on the pool."""
        try:
            self._tasks.run(self._library.list, self._set_models, self._load_failed, owner=self)
        except RuntimeError:  # the pool is shut down: Hearth is closing, a late library change needs no read
            logger.debug("library changed while closing; the Download buttons keep their last state")

    def _set_models(self, models: list[LocalModel]) -> None:
        self.models, self.models_loaded = models, True
        self.updated.emit()

    def _load_failed(self, exc: BaseException) -> None:
        logger.error("reading the library for the Download buttons failed", exc_info=exc)

    def _on_item(self, item: DownloadItem) -> None:
        previous = self.items.get(item.id)
        if item.state == State.DONE and (previous is None or previous.state != State.DONE):
            self.finished_here.add(item.id)
        self.items[item.id] = item
        if item.state not in (State.ACTIVE, State.VERIFYING):
            self.progress.pop(item.id, None)  # a paused or failed item's last rate is not a speed now
        if item.state == State.FAILED and is_offline(item.error or ""):
            self._set_offline(True)  # a download that lost the Hub: the page's banner says so too
        self.updated.emit()

    def _on_removed(self, item_id: str) -> None:
        self.items.pop(item_id, None)
        self.progress.pop(item_id, None)
        self.updated.emit()

    def _on_progress(self, p: Progress) -> None:
        if p.item_id in self.items:
            self.progress[p.item_id] = p
            self.updated.emit()

    def _on_preparing(self, variant: Variant) -> None:
        self.preparing.add(variant_key(variant))
        self.request_errors.pop(variant_key(variant), None)
        self.updated.emit()

    def _on_request_finished(self, variant: Variant, error: str) -> None:
        key = variant_key(variant)
        self.preparing.discard(key)
        if error:
            self.request_errors[key] = error
        self._set_offline(is_offline(error) if error else False)
        self.updated.emit()

    def _set_offline(self, offline: bool) -> None:
        if offline != self.offline:
            self.offline = offline
            self.offline_changed.emit(offline)

    def set_offline(self, offline: bool) -> None:
        """Main thread: the Hub was found out of reach (or back) by another call (the start's check, a
        search): the buttons that need it are off, with the reason, until it answers again."""
        if offline:
            self._set_offline(True)
            self.updated.emit()
        elif self.offline:
            self.clear_offline()

    def clear_offline(self) -> None:
        """Main thread: the Hub answers again; the buttons that failed for want of it offer Download again."""
        self.request_errors = {k: e for k, e in self.request_errors.items() if not is_offline(e)}
        self._set_offline(False)
        self.updated.emit()

    @property
    def has_ready_model(self) -> bool:
        return any(m.ready for m in self.models)

    def item_for(self, v: Variant) -> DownloadItem | None:
        key = variant_key(v)
        mine = [i for i in self.items.values() if item_key(i) == key]
        return max(mine, key=lambda i: i.added_at) if mine else None

    def model_for(self, v: Variant) -> LocalModel | None:
        """GGUF downloads are recorded by repo and quant; MLX and EXL2 ones by their folder."""
        label = v.label.lower()
        folder = self.models_dir / repo_folder(v.repo_id, v.revision or "main") if v.repo_id else None
        hits = [
            m
            for m in self.models
            if m.repo_id == v.repo_id and ((m.quant or "").lower() == label if v.format == GGUF else m.path == folder)
        ]
        hits.sort(key=lambda m: not m.ready)
        return hits[0] if hits else None

    def state(
        self, v: Variant, *, can_download: bool = True, why_not: str = ""
    ) -> tuple[ButtonView, DownloadItem | None, LocalModel | None]:
        item, model = self.item_for(v), self.model_for(v)
        if item is not None and item.state == State.DONE and model is None and item.id not in self.finished_here:
            item = None
        progress = self.progress.get(item.id) if item is not None else None
        key = variant_key(v)
        view = button_view(
            item,
            progress,
            model,
            preparing=key in self.preparing,
            request_error=self.request_errors.get(key, ""),
            can_download=can_download,
            why_not=why_not,
            offline=self.offline,
        )
        return view, item, model

    # ---- actions ----

    def chat(self, model: LocalModel) -> None:
        self.chat_requested.emit(model)

    def act(self, action: str, item_id: str) -> None:
        """Retry or resume through the Downloads page, which runs the manager call on the pool."""
        self._panel.act(action, item_id)


class DownloadButton(QWidget):
    """Download for one variant, turning into its download's progress, result or error in place."""

    download_requested = Signal(object)  # the payload given (an Assessment or a Variant)
    changed = Signal()  # after each refresh: what it shows may have changed

    def __init__(
        self,
        payload: Any,
        feed: DownloadFeed | None = None,
        *,
        can_download: bool = True,
        why_not: str = "",
        inline_note: bool = True,
        parent: QWidget | None = None,
    ) -> None:
        """`why_not`: why Download is off when `can_download` is False (its tooltip). `inline_note`: show a
        failure's short words beside the button; without it the owner shows `error_text()` where it has room."""
        super().__init__(parent)
        self.payload = payload
        self.variant: Variant | None = getattr(payload, "variant", payload)
        self.can_download = can_download and self.variant is not None
        self.why_not = why_not
        self.feed: DownloadFeed | None = None
        self.view = ButtonView("Download", self.can_download, "download")
        self._item: DownloadItem | None = None
        self._model: LocalModel | None = None
        self.inline_note = inline_note
        # A failure in short words, cut to the room there is (never widening a card or a table column);
        # the whole text is the button's tooltip.
        self.note: QLabel = ElidedLabel()
        # A few words at most: in a table the column would otherwise grow to the note and scroll sideways.
        self.note.setMaximumWidth(NOTE_CHARS * self.note.fontMetrics().averageCharWidth())
        set_status(self.note, "error")
        self.note.setVisible(False)
        self.button = QPushButton("Download")
        self.button.setProperty("role", "primary")  # the style sheet's primary button
        self.button.clicked.connect(self._clicked)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.note, 1)
        layout.addWidget(self.button)
        self.set_feed(feed)

    def set_feed(self, feed: DownloadFeed | None) -> None:
        if feed is not None and feed is not self.feed:
            feed.updated.connect(self.refresh)  # a QObject's slot: dropped when this button is deleted
        self.feed = feed
        self.refresh()

    def refresh(self) -> None:
        if self.feed is None or self.variant is None:
            self.view = ButtonView("Download", self.can_download, "download", "" if self.can_download else self.why_not)
            self._item = self._model = None
        else:
            self.view, self._item, self._model = self.feed.state(
                self.variant, can_download=self.can_download, why_not=self.why_not
            )
        v = self.view
        tooltip = as_sentences(v.tooltip) if v.error or not v.enabled else v.tooltip
        self.button.setText(v.text)
        self.button.setEnabled(v.enabled)
        self.button.setToolTip(tooltip)
        self.setToolTip(tooltip if not v.enabled else "")  # a disabled button's reason, wherever the cell is hovered
        self.note.setText(OFFLINE_NOTE if is_offline(v.tooltip) else capitalised(v.error))
        self.note.setToolTip(tooltip)
        # A failed download says why beside its Retry (offline in two words: the page's banner says the rest).
        self.note.setVisible(self.inline_note and bool(self.error_text()))
        self.changed.emit()

    def error_text(self) -> str:
        """The failure to show for this button, as sentences; "" when none."""
        v = self.view
        if not v.error:
            return ""
        return OFFLINE_NOTE + "." if is_offline(v.tooltip) else as_sentences(v.tooltip.split("\n", 1)[0])

    def set_primary(self, primary: bool) -> None:
        """The orange main action, or a plain button (a pick that would run too slowly to recommend)."""
        restyle_by(self.button, "role", "primary" if primary else None)

    def _clicked(self) -> None:
        action = self.view.action
        if action == "download":
            self.download_requested.emit(self.payload)
        elif action == "chat" and self.feed is not None and self._model is not None:
            self.feed.chat(self._model)
        elif action in ("retry", "resume") and self.feed is not None and self._item is not None:
            self.feed.act(action, self._item.id)

    def text(self) -> str:
        return self.button.text()
