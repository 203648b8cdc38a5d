"""Remote servers on My Models: OpenAI-compatible servers elsewhere (vLLM, SGLang, llama-server, Ollama,
LM Studio, TGI, another Hearth) and their models, as the last probe saw them. Add one (it is probed
first), refresh, remove, choose whether Hearth's own API serves its models too, and Chat with a model as
with a local one. Every probe and every write of the store runs on the pool."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.engines.remote import FORMAT, Remote, RemoteEntry, RemoteStore
from app.core.engines.remote.ids import spec_path
from app.core.library import LocalModel
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

COLUMNS = ["Model", "Server", "Context", "Hearth's API", "Status"]


def as_local_model(entry: RemoteEntry) -> LocalModel:
    """A remote model in the shape the Chat page's picker lists (it loads `path` with format "remote")."""
    return LocalModel(
        id=f"remote:{entry.id}",
        name=entry.id,
        format=FORMAT,
        quant=None,
        size=0,
        path=spec_path(entry.remote.name, entry.model.id),
        files=(),
        repo_id=None,
        commit=None,
        source="remote",
        added_at=entry.remote.probed_at or time.time(),
        last_used_at=None,
        status="ready" if entry.remote.reachable else "missing",
        reason=entry.remote.error,
    )


def remote_models(store: RemoteStore) -> Callable[[], list[LocalModel]]:
    """What the Chat picker lists beside the library: every reachable remote model (reads a small file)."""

    def listed() -> list[LocalModel]:
        try:
            return [as_local_model(e) for e in store.entries() if e.remote.reachable]
        except OSError as exc:
            logger.warning("cannot read the remote servers: %s", exc)
            return []

    return listed


def _refreshed(r: Remote) -> str:
    return f"{r.name}: {len(r.models)} models." if r.reachable else f"{r.name} is unreachable: {r.error}"


class AddRemoteDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, url: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a server")
        self.url = QLineEdit(url)
        self.url.setPlaceholderText("http://gpu-box:8000 (with or without /v1)")
        self.name = QLineEdit()
        self.name.setPlaceholderText("a short name (default: from the URL)")
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("if the server needs one (kept with owner-only access)")
        self.expose = QCheckBox("Serve its models on Hearth's API too")
        form = QFormLayout(self)
        form.addRow("URL", self.url)
        form.addRow("Name", self.name)
        form.addRow("API key", self.api_key)
        form.addRow("", self.expose)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class RemotesPanel(QWidget):
    """`chat_requested(LocalModel)`: open a remote model in Chat. `changed()`: the remotes changed (the
    Chat picker lists them again)."""

    chat_requested = Signal(object)
    changed = Signal()

    def __init__(
        self,
        store: RemoteStore,
        tasks: TaskRunner,
        *,
        ask: Callable[[QWidget, str], tuple[str, str, str, bool] | None] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        """`ask(parent, url)` returns (url, name, api key, expose) for a new server, or None (the dialog)."""
        super().__init__(parent)
        self.store, self._tasks = store, tasks
        self._ask = ask or self._ask_dialog
        self.entries: list[RemoteEntry] = []
        self.busy = False
        title = QLabel("Remote servers")
        title.setObjectName("cardTitle")
        hint = QLabel(
            "Models served elsewhere — vLLM, SGLang, llama-server, Ollama, LM Studio, another Hearth. Chat "
            "with them here; tick Hearth's API to serve them on this machine's endpoint too."
        )
        hint.setObjectName("hint")
        hint.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(180)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.cellDoubleClicked.connect(lambda _r, _c: self.chat_selected())
        self.add_button = QPushButton("Add a remote server…")
        self.add_button.clicked.connect(lambda: self.add_clicked())
        self.chat_button = QPushButton("Chat")
        self.chat_button.clicked.connect(self.chat_selected)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Ask the server again which models it serves")
        self.refresh_button.clicked.connect(self.refresh_selected)
        self.expose_box = QCheckBox("Serve on Hearth's API")
        self.expose_box.toggled.connect(self._expose_toggled)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setProperty("role", "destructive")
        self.remove_button.clicked.connect(self.remove_selected)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setVisible(False)
        # Until a server is added, the section is one line: the Add button and what it is for.
        self.collapsed_hint = QLabel("Models served elsewhere: vLLM, Ollama, LM Studio, another Hearth.")
        self.collapsed_hint.setObjectName("hint")
        self.collapsed_hint.setWordWrap(True)
        buttons = QHBoxLayout()
        for w in (self.add_button, self.chat_button, self.refresh_button, self.expose_box, self.remove_button):
            buttons.addWidget(w)
        buttons.addWidget(self.collapsed_hint, 10)  # the spare width, nearly all, while it shows
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 8, 0, 0)
        layout.addWidget(title)
        layout.addWidget(hint)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(self.table)
        self._expanded_only = (title, hint, self.chat_button, self.refresh_button, self.expose_box, self.remove_button)
        self.collapsed = False
        self._collapse(True)  # nothing is known yet: the short form, until the store says otherwise
        self.reload()

    # ---- reading ----

    def reload(self) -> None:
        """Main thread: read the store on the pool (no network) and refill the table."""
        store = self.store
        self._tasks.run(lambda: (bool(store.list()), store.entries()), self._listed, self._failed, owner=self)

    def _listed(self, listed: tuple[bool, list[RemoteEntry]]) -> None:
        any_remote, entries = listed
        self._collapse(not any_remote)
        self._show(entries)

    def _collapse(self, collapsed: bool) -> None:
        """One line (the Add button and what it is for) while no server is added; the full section once one is."""
        if collapsed == self.collapsed:
            return
        self.collapsed = collapsed
        for w in self._expanded_only:
            w.setVisible(not collapsed)
        self.table.setVisible(not collapsed)
        self.collapsed_hint.setVisible(collapsed)

    def _show(self, entries: list[RemoteEntry]) -> None:
        selected = self.selected()
        self.entries = list(entries)
        self.table.setRowCount(len(entries))
        for row, e in enumerate(entries):
            ctx = e.model.context_length
            cells = [
                e.id,
                f"{e.remote.kind_name} · {e.remote.url}",
                f"{ctx:,}" if ctx else "—",
                "served" if e.remote.expose_locally else "—",
                "reachable" if e.remote.reachable else f"unreachable: {e.remote.error}",
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == len(cells) - 1 and not e.remote.reachable:
                    item.setToolTip(e.remote.error)
                self.table.setItem(row, col, item)
        keep = next((i for i, e in enumerate(entries) if selected is not None and e.id == selected.id), None)
        if keep is not None:
            self.table.selectRow(keep)
        self._update_buttons()

    def selected(self) -> RemoteEntry | None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        return self.entries[min(rows)] if rows and min(rows) < len(self.entries) else None

    def select(self, model_id: str) -> None:
        row = next((i for i, e in enumerate(self.entries) if e.id == model_id), None)
        if row is not None:
            self.table.selectRow(row)

    # ---- actions ----

    def add_clicked(self, url: str = "") -> None:
        """Main thread: ask for a server (`url` filled in, e.g. from a deployment plan) and add it."""
        answer = self._ask(self, url)
        if answer is not None:
            self.add(*answer)

    def add(self, url: str, name: str = "", api_key: str = "", expose: bool = False) -> None:
        """Main thread: probe `url` on the pool and save it; the table shows it, or the status says why not."""
        if not url.strip():
            self._say("Give the server's URL, e.g. http://gpu-box:8000.", "error")
            return
        store = self.store

        def op():
            return store.add(url.strip(), name=name.strip() or None, api_key=api_key or None, expose_locally=expose)

        self._run(
            op,
            f"Asking {url.strip()} what it serves…",
            lambda r: f"Added {r.name}: {r.kind_name}, {len(r.models)} model{'s' if len(r.models) != 1 else ''}.",
        )

    def refresh_selected(self) -> None:
        entry = self.selected()
        if entry is not None:
            name = entry.remote.name
            self._run(
                lambda: self.store.refresh(name),
                f"Asking {name} again…",
                lambda r: (
                    f"{r.name}: {len(r.models)} models." if r.reachable else f"{r.name} is unreachable: {r.error}"
                ),
            )

    def remove_selected(self) -> None:
        entry = self.selected()
        if entry is not None:
            name = entry.remote.name
            self._run(lambda: self.store.remove(name), f"Removing {name}…", lambda _r: f"Removed {name}.")

    def _expose_toggled(self, on: bool) -> None:
        entry = self.selected()
        if entry is None or entry.remote.expose_locally == on:
            return
        name = entry.remote.name
        what = "served on Hearth's API" if on else "no longer served on Hearth's API"
        self._run(lambda: self.store.set_expose(name, on), "", lambda _r: f"{name}'s models are {what}.")

    def chat_selected(self) -> None:
        entry = self.selected()
        if entry is None:
            return
        if not entry.remote.reachable:
            self._say(f"{entry.remote.name} is unreachable: {entry.remote.error}. Refresh it first.", "error")
            return
        self.chat_requested.emit(as_local_model(entry))

    def _run(self, op: Callable[[], Any], doing: str, done: Callable[[Any], str]) -> None:
        self.busy = True
        self._update_buttons()
        if doing:
            self._say(doing, "muted")

        def ok(result: object) -> None:
            self.busy = False
            self._say(done(result), "success")
            self.changed.emit()
            self.reload()

        def failed(exc: BaseException) -> None:
            self.busy = False
            self._failed(exc)
            self.reload()

        self._tasks.run(op, ok, failed, owner=self)

    def _failed(self, exc: BaseException) -> None:
        logger.info("remote servers: %s", exc)  # the store's errors never hold a key
        self._say(str(exc), "error")
        self._update_buttons()

    def _update_buttons(self) -> None:
        entry = self.selected()
        for b in (self.chat_button, self.refresh_button, self.remove_button):
            b.setEnabled(entry is not None and not self.busy)
        self.add_button.setEnabled(not self.busy)
        self.expose_box.blockSignals(True)
        self.expose_box.setChecked(bool(entry and entry.remote.expose_locally))
        self.expose_box.setEnabled(entry is not None and not self.busy)
        self.expose_box.blockSignals(False)

    def _say(self, text: str, status=None) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))
        set_status(self.status, status)

    def _ask_dialog(self, parent: QWidget, url: str) -> tuple[str, str, str, bool] | None:
        dialog = AddRemoteDialog(parent, url)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return None
        return dialog.url.text(), dialog.name.text(), dialog.api_key.text(), dialog.expose.isChecked()
