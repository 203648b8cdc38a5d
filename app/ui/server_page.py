"""The Server page: run the local API, edit its settings and key, watch its requests,
copy a snippet that calls it, and connect a tool (server_connect.py). Start, stop, saves, restarts and
tests run off the UI thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QMessageBox, QSplitter, QVBoxLayout, QWidget

from app.core.connect import Target, context_warning
from app.core.errors import HearthError
from app.core.library import Library
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import HostState
from app.core.settings import ServerSettings, Settings, SettingsStore
from app.ui.bridge import EventBridge
from app.ui.chat.stream import HostWatcher
from app.ui.server_api import ApiControl, ServerStatusLike
from app.ui.server_cards import Card, KeyCard, SnippetCard, StatusCard, copy_text
from app.ui.server_connect import ConnectCard
from app.ui.server_log import DEFAULT_ROWS, RequestLogView
from app.ui.server_model import (
    base_url,
    curl_snippet,
    engine_text,
    key_note,
    mask_key,
    needs_restart,
    python_snippet,
    slots_text,
)
from app.ui.server_settings import ServerSettingsForm, validation_text
from app.ui.tasks import TaskRunner
from app.ui.widgets.loaded_models import LoadedModelsStrip
from app.ui.widgets.scroll import scrolling

logger = logging.getLogger(__name__)

NOTE_MS = 4000
LOG_MIN_HEIGHT = 120  # px: a few rows of the request log, even on a small window
TWO_COLUMNS_MIN_WIDTH = 860  # px of page: below it, the settings and the key/snippets stack
REGENERATE_TEXT = "Make a new API key? Clients that use the current key stop working until they are given the new one."


class ServerPage(QWidget):
    status_shown = Signal(object)  # ServerStatusLike, each time the page shows a status (main thread)
    settings_saved = Signal(object)  # Settings, once a save (and the restart it needed) is done
    save_failed = Signal(str)  # why the settings were not saved
    models_changed = Signal(str)  # the model id the snippets use ("" for none)

    def __init__(
        self,
        api: ApiControl,
        store: SettingsStore,
        settings: Callable[[], Settings],
        library: Library,
        host: JobHost,
        tasks: TaskRunner,
        *,
        new_key: Callable[[], str],
        confirm: Callable[[str, str], bool] | None = None,
        log_rows: int = DEFAULT_ROWS,
        parent: QWidget | None = None,
    ) -> None:
        """`settings()` gives the current Settings (any thread); `new_key()` makes an API key."""
        super().__init__(parent)
        self.api, self._store, self._settings = api, store, settings
        self.library, self.host, self._tasks = library, host, tasks
        self._new_key = new_key
        self._confirm = confirm or self._ask
        self.busy = False
        self._refocus = False  # Start or Stop had the focus when a start or stop began
        self.model_id = ""
        self.model_context: int | None = None  # what model_id loads with (None: not known)
        self._loaded: tuple[str, int] | None = None  # the loaded model's (path, n_ctx), to follow a new one

        title = QLabel("Server")
        title.setObjectName("pageTitle")
        subtitle = QLabel(
            "A local API over the models in My Models, shared with the chat: OpenAI (Chat Completions, "
            "Responses) and Anthropic (Messages)."
        )
        subtitle.setWordWrap(True)
        self.status_card = StatusCard()
        self.status_card.start_button.clicked.connect(self.start)
        self.status_card.stop_button.clicked.connect(self.stop)
        # What the API serves now without a load first (a request for another model loads it beside these).
        self.loaded_models = LoadedModelsStrip(host)
        self.status_card.body.addWidget(self.loaded_models)
        self.form = ServerSettingsForm(settings().server, parallel=settings().parallel_requests)
        self.form.save_button.clicked.connect(self.save_settings)
        self.key_card = KeyCard()
        self.key_card.show_button.toggled.connect(lambda _: self._show_snippets())
        self.key_card.regenerate_button.clicked.connect(self.regenerate_key)
        self.key_card.make_button.clicked.connect(self.make_key)
        self.snippet_card = SnippetCard()
        self.snippet_card.copy_button.clicked.connect(self.copy_snippet)
        self.connect_card = ConnectCard(tasks)
        self.log_card = log_card = Card("Requests")
        self.log_view = RequestLogView(api.log, log_rows)
        self.log_view.setMinimumHeight(LOG_MIN_HEIGHT)
        log_card.body.addWidget(self.log_view, 1)
        self.connect_card.result_shown.connect(self._show_test_result)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.key_card)
        right_layout.addWidget(self.snippet_card, 1)
        self._right = right
        self._grid = grid = QGridLayout()
        self.columns = 0
        self._arrange(2)
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.addWidget(title)
        layout.addWidget(subtitle)
        layout.addWidget(self.status_card)
        layout.addLayout(grid)
        layout.addWidget(self.connect_card)
        layout.addStretch(1)
        scroll = scrolling(body)  # a small window scrolls the settings rather than squeezing them
        # The log has a place of its own under the scrolling settings, always in view: at the foot of the
        # long page it sat below the fold, and its newest row came in where no one was looking.
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(scroll)
        self.split.addWidget(log_card)
        self.split.setChildrenCollapsible(False)
        self.split.setStretchFactor(0, 1)  # half each: the settings scroll, the log shows a screenful
        self.split.setStretchFactor(1, 1)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.split)

        self.page_scroll = scroll
        self._status_bridge = EventBridge(api.changed, self)
        self._status_bridge.fired.connect(self._show_status)
        # A save elsewhere (the key ApiService makes for LAN mode, the Settings dialog) shows here too.
        self._settings_bridge = EventBridge(store.changed, self, coalesce_key=lambda _: None)
        self._settings_bridge.fired.connect(self._settings_changed)
        self._library_bridge = EventBridge(library.changed, self, coalesce_key=lambda _: None)
        self._library_bridge.fired.connect(lambda _: self.refresh_models())
        self._host_watcher = HostWatcher(host, self)
        self._host_watcher.changed.connect(self._show_engine)
        self._loaded = _loaded_key(host.state)  # refresh_models below already picks this one
        self._show_engine(host.state)
        self._show_key(settings().server)
        self._show_status(api.status)
        self.refresh_models()

    # ---- layout ----

    def _arrange(self, columns: int) -> None:
        """Settings beside the key and the snippets when there is room, above them when not: two columns
        in a narrow window made the whole page scroll sideways."""
        if columns == self.columns:
            return
        self.columns = columns
        grid = self._grid
        grid.removeWidget(self.form)
        grid.removeWidget(self._right)
        if columns == 2:
            grid.addWidget(self.form, 0, 0)
            grid.addWidget(self._right, 0, 1)
            grid.setColumnStretch(1, 1)
        else:
            grid.addWidget(self.form, 0, 0)
            grid.addWidget(self._right, 1, 0)
            grid.setColumnStretch(1, 0)
        grid.setColumnStretch(0, 1)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        self._arrange(2 if event.size().width() >= TWO_COLUMNS_MIN_WIDTH else 1)
        super().resizeEvent(event)

    # ---- start / stop ----

    def start(self) -> None:
        self._work("Starting…", self.api.start)

    def stop(self) -> None:
        self._work("Stopping…", self.api.stop)

    def _work(
        self,
        text: str,
        op: Callable[[], object],
        then: Callable[[object], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """Run `op` on the pool with the controls disabled; a second click meanwhile is ignored."""
        if self.busy:
            return
        self._set_busy(True, text)

        def done(value: object) -> None:
            """Main thread."""
            self._set_busy(False)
            self._show_status(self.api.status)
            if then is not None:
                then(value)

        def failed(exc: BaseException) -> None:
            """Main thread."""
            logger.error("server page task failed", exc_info=exc)
            self._set_busy(False)
            self._show_status(self.api.status)
            self.status_card.set_error(f"That did not work: {exc}")
            if on_error is not None:
                on_error(str(exc))

        self._tasks.run(op, done, failed, owner=self)

    def _set_busy(self, busy: bool, text: str = "") -> None:
        self.busy = busy
        if busy:
            self.status_card.set_state(text, running=False)
        card = self.status_card
        if busy and (card.start_button.hasFocus() or card.stop_button.hasFocus()):
            # A disabled button hands focus to the next field (the Port box): keep it on the card instead,
            # and give it to whichever of Start and Stop comes back (_show_status).
            self._refocus = True
            card.copy_url_button.setFocus()
        for button in (card.start_button, card.stop_button, self.form.save_button):
            button.setEnabled(not busy)
        self.key_card.regenerate_button.setEnabled(not busy)
        self.key_card.make_button.setEnabled(not busy)

    def _show_status(self, status: ServerStatusLike) -> None:
        """Main thread: from a finished start/stop or the service's `changed`."""
        card = self.status_card
        if not self.busy:
            card.set_state("● Running" if status.running else "Stopped", running=status.running)
            card.start_button.setEnabled(not status.running)
            card.stop_button.setEnabled(status.running)
            if self._refocus:
                self._refocus = False
                (card.stop_button if status.running else card.start_button).setFocus()
        card.url.setText(status.url if status.running else base_url(self._settings().server))
        card.set_error(f"Could not start: {status.error}" if status.error else "")
        running = status.running
        card.set_ollama(status.ollama_url if running else "", status.ollama_error if running else "")
        self._show_snippets()
        self.status_shown.emit(status)

    # ---- settings ----

    def save_settings(self) -> None:
        current = self._settings()
        try:
            server = self.form.edited(current.server)
        except ValidationError as exc:
            # Say what is wrong and save nothing: a setting the server cannot use must not reach the file.
            text = validation_text(exc)
            self.form.show_error(text)
            self.save_failed.emit(text)
            return
        self.form.show_error("")
        new = current.model_copy(update={"server": server, "parallel_requests": self.form.parallel.value()})
        self._save(new, needs_restart(current.server, server), "Saved.", reload_form=True)

    def _save(self, new: Settings, restart: bool, note: str, *, reload_form: bool) -> None:
        """Save on the pool, then restart a running server when what it listens with changed.
        `reload_form` False (a key save) keeps edits the form has not saved yet."""
        store, api = self._store, self.api

        def op() -> bool:
            store.save(new)
            return restart and api.restart().running  # restart() leaves a stopped server stopped

        def saved(restarted: object) -> None:
            """Main thread."""
            if reload_form:
                self.form.load(new.server, new.parallel_requests)
            self._show_key(new.server)
            self.form.note.setText(note + (" The server restarted with them." if restarted else ""))
            QTimer.singleShot(NOTE_MS, self.form.note, lambda: self.form.note.setText(""))
            self.settings_saved.emit(new)

        busy_text = "Restarting…" if restart and api.status.running else "Saving…"
        self._work(busy_text, op, saved, self.save_failed.emit)

    def _settings_changed(self, settings: Settings) -> None:
        """Main thread: Settings were saved, here or elsewhere; unsaved edits in the form are kept."""
        self._show_key(settings.server)
        if not self.form.dirty and not self.busy:
            self.form.load(settings.server, settings.parallel_requests)
        self._show_status(self.api.status)

    def _show_test_result(self) -> None:
        """Main thread: a tool's Test answered: its result scrolls into view (it sits at the card's foot)."""
        body = self.page_scroll.widget()
        layout = body.layout() if body is not None else None
        if layout is not None:
            layout.activate()  # the result's new height, before scrolling to it
        self.page_scroll.ensureWidgetVisible(self.connect_card.result, 0, 12)

    def focus_parallel_requests(self) -> None:
        """Main thread: scroll to the Parallel requests field and give it the keyboard focus (Settings
        links here: this page is the one place it is edited)."""
        self.page_scroll.ensureWidgetVisible(self.form.parallel_hint, 0, 8)  # its explanation in view too
        self.page_scroll.ensureWidgetVisible(self.form.parallel)
        self.form.parallel.setFocus(Qt.FocusReason.OtherFocusReason)

    # ---- key ----

    def make_key(self) -> None:
        self._save_key(self._new_key(), "A key was made.")

    def regenerate_key(self) -> None:
        if self._confirm("Regenerate the API key", REGENERATE_TEXT):
            self._save_key(self._new_key(), "A new key was made; the old one no longer works.")

    def _save_key(self, key: str, note: str) -> None:
        current = self._settings()
        server = current.server.model_copy(update={"api_key": key})
        # The running server checks the key it started with; when none is required there is nothing to apply.
        self._save(current.model_copy(update={"server": server}), server.key_required, note, reload_form=False)

    def _show_key(self, server: ServerSettings) -> None:
        self.key_card.set_key(server.api_key, key_note(server))
        self._show_snippets()

    # ---- snippets ----

    def refresh_models(self) -> None:
        """The model the snippets name: the loaded one if it is in the library, else the most recent; and
        the context it has (loaded) or would load with (the host's resolver, as a request's JIT load)."""
        library, host = self.library, self.host

        def op() -> tuple[str, int | None]:
            models = library.list(status="ready")
            loaded = host.state.model
            for m in models:
                if loaded is not None and Path(m.path) == Path(loaded.path):
                    return m.name, loaded.n_ctx
            if not models:
                return "", None
            try:
                return models[0].name, host.resolver(models[0].name).spec.n_ctx if host.resolver else None
            except (HearthError, OSError) as exc:  # the id still serves; only the context stays unknown
                logger.info("no context for %s: %s", models[0].name, exc)
                return models[0].name, None

        def failed(exc: BaseException) -> None:
            logger.warning("listing the library's models failed: %s", exc)

        self._tasks.run(op, self._models_listed, failed, owner=self)

    def _models_listed(self, listed: tuple[str, int | None]) -> None:
        """Main thread."""
        self.model_id, self.model_context = listed
        self._show_snippets()
        self.models_changed.emit(self.model_id)

    def snippet(self, kind: str, *, reveal: bool = True) -> str:
        """`kind` "curl" or "python"; with `reveal` False the key is masked, as the page shows it until Show."""
        server = self._settings().server
        status = self.api.status
        url = status.url if status.running else base_url(server)
        key = server.api_key if server.key_required else ""
        if key and not reveal:
            key = mask_key(key)
        make = curl_snippet if kind == "curl" else python_snippet
        return make(url, self.model_id, key)

    def connect_target(self) -> Target:
        """What the Connect card writes its configurations from: the snippets' URL, real key and model."""
        server, status = self._settings().server, self.api.status
        url = status.url if status.running else base_url(server)
        key = server.api_key if server.key_required else ""
        return Target(url, key, self.model_id, self.model_context)

    def copy_snippet(self) -> None:
        """The snippet shown, with the real key even while the page masks it."""
        copy_text(self.snippet(self.snippet_card.shown_kind), self.snippet_card.copy_button)

    def _show_snippets(self) -> None:
        card, server = self.snippet_card, self._settings().server
        reveal = self.key_card.revealed
        card.curl.setPlainText(self.snippet("curl", reveal=reveal))
        card.python.setPlainText(self.snippet("python", reveal=reveal))
        self.connect_card.show_target(self.connect_target(), reveal=reveal)
        if not self.model_id:
            card.note.setText("No model is ready yet: download one in Discover and its id appears here.")
        elif server.key_required and not server.api_key:
            card.note.setText("The key is made when the server starts.")
        else:
            card.note.setText(f"Model ids are the names in My Models; this one is {self.model_id}.")

    # ---- engine ----

    def _show_engine(self, state: HostState) -> None:
        """Main thread (HostWatcher re-posts the host's state)."""
        self.status_card.engine.setText(engine_text(state, self._settings().server.jit_load))
        self.status_card.set_slots(slots_text(state))
        self.status_card.set_context_warning(context_warning(state.model.n_ctx if state.model else None))
        loaded = _loaded_key(state)
        if loaded != self._loaded:
            self._loaded = loaded
            if loaded is not None:  # a newly loaded model (or context) is what the snippets should name
                self.refresh_models()

    def _ask(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes


def _loaded_key(state: HostState) -> tuple[str, int] | None:
    return (str(state.model.path), state.model.n_ctx) if state.model is not None else None
