"""Settings dialog: edits the `Settings` model, and says beside each field what is in effect (a value
from the environment, the default) so an empty field never hides where a value comes from."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import ValidationError
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.hub.urls import DEFAULT_ENDPOINT
from app.core.mcp.config import CONFIG_NAME, McpConfigError, known_config_files, load_config
from app.core.mcp.importing import import_servers
from app.core.mcp.secrets import SecretStore
from app.core.paths import AppPaths
from app.core.settings import Settings, SettingsStore
from app.ui.documents.dialogs import ModelChoices
from app.ui.file_dialogs import existing_folder
from app.ui.mcp_editor import McpServerList
from app.ui.server_model import parallel_text
from app.ui.theme import set_status
from app.ui.widgets.scroll import scrolling

# What "measure on first start" does (app/main.py): the bandwidth with the hardware probe, then the quant probe.
MEASURE_HINT = (
    "Hearth measures the memory bandwidth (0.2 s), then how fast each quantization decodes on this CPU (about "
    "half a minute, in the background once the machine is quiet). Both are kept for this CPU and make the "
    "speed predictions closer to what you will see."
)
# Parallel requests is edited in one place, the Server page's settings; here it is only shown.
PARALLEL_HERE = "The chat and the API share these. Change them in the Server page's settings."


def endpoint_in_effect(typed: str, env: Mapping[str, str]) -> str:
    """Which Hub the app talks to for this field's text, and why (the order HubClient.from_settings uses)."""
    if typed.strip():
        return f"In effect: {typed.strip().rstrip('/')} (this setting)"
    if env.get("HF_ENDPOINT"):
        return f"In effect: {env['HF_ENDPOINT'].rstrip('/')} (from the HF_ENDPOINT environment variable)"
    return f"In effect: {DEFAULT_ENDPOINT} (the public Hub)"


def token_in_effect(typed: str, env: Mapping[str, str]) -> str:
    if typed:
        return "In effect: the token above, sent only to the Hub endpoint"
    if env.get("HF_TOKEN"):
        return "In effect: the token in the HF_TOKEN environment variable"
    return "In effect: no token, so public models only. Gated and private ones need a token."


# Settings → Documents: what an empty choice means (documents/service.py pick_model and reranker).
EMBEDDING_AUTO = "Automatic (the embedding model used last)"
RERANKER_NONE = "Only one already loaded"
DOCUMENTS_HINT = (
    "New collections are embedded by this model; a collection keeps the model it was made with (change it on "
    "the Documents page). A reranker puts each search's best passages first, at some seconds per search on a CPU."
)


SPECULATIVE_CHOICES = (
    ("Automatic (prompt lookup, only where it measures faster)", "auto"),
    ("Off", "off"),
)
SPECULATIVE_HINT = (
    "Hearth guesses the next few tokens from text already in the conversation (or with a draft model picked "
    "in the chat's Advanced options) and checks them in one step. The reply is the same; it only comes "
    "faster when the guesses are right."
)


def _hint(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setObjectName("hint")
    return label


def _model_combo(empty: str, models: list[str], chosen: str) -> QComboBox:
    """A choice of library models, `empty` first (the setting's "" ); a chosen model that is not in the list
    (deleted since, or the list not read yet) stays offered, so saving does not drop it."""
    combo = QComboBox()
    combo.addItem(empty, "")
    for name in [*models, *([chosen] if chosen and chosen not in models else [])]:
        combo.addItem(name if name in models or not models else f"{name} (not in My Models)", name)
    combo.setCurrentIndex(max(0, combo.findData(chosen)))
    return combo


class SettingsDialog(QDialog):
    def __init__(
        self,
        store: SettingsStore,
        settings: Settings,
        paths: AppPaths,
        parent: QWidget | None = None,
        env: Mapping[str, str] | None = None,
        show_server_settings: Callable[[], None] | None = None,
        documents: ModelChoices | None = None,
    ) -> None:
        """`env`: the environment the Hub settings fall back to (os.environ); `show_server_settings()`
        opens the Server page's settings, where Parallel requests is changed (None: no link to it);
        `documents`: the library's embedding models and rerankers, as the Documents page last read them
        (None: only the models named in Settings are offered)."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._show_server_settings = show_server_settings
        self._store = store
        self._settings = settings
        self._paths = paths
        self._env = os.environ if env is None else env

        general = QGroupBox("General")
        form = QFormLayout(general)
        # The real folder, default or not: a path the user can read and copy, never a grey placeholder.
        self.models_dir = QLineEdit(settings.models_dir or str(paths.models))
        browse = QPushButton("Change…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.models_dir, 1)
        row.addWidget(browse)
        form.addRow("Models folder", row)
        form.addRow(_hint("Downloads go here. Models imported in place stay where they are."))
        self.theme = QComboBox()
        for label, value in (("Follow the system", "system"), ("Light", "light"), ("Dark", "dark")):
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.theme)))
        form.addRow("Appearance", self.theme)
        self.log_level = QComboBox()
        self.log_level.addItems(["DEBUG", "INFO", "WARNING", "ERROR"])
        self.log_level.setCurrentText(settings.log_level)
        form.addRow("Log level", self.log_level)

        hardware = QGroupBox("Hardware")
        hform = QFormLayout(hardware)
        self.measure_bw = QCheckBox("Measure this machine on first start")
        self.measure_bw.setChecked(settings.measure_bandwidth_on_start)
        hform.addRow(self.measure_bw)
        hform.addRow(_hint(MEASURE_HINT))
        self.parallel_requests = QLabel(parallel_text(settings.parallel_requests))
        parallel = QHBoxLayout()
        parallel.addWidget(self.parallel_requests)
        self.parallel_link = QPushButton("Change on the Server page")
        self.parallel_link.clicked.connect(self.open_server_settings)
        self.parallel_link.setVisible(show_server_settings is not None)
        parallel.addWidget(self.parallel_link)
        parallel.addStretch(1)
        hform.addRow("Parallel requests", parallel)
        hform.addRow(_hint(PARALLEL_HERE))
        self.speculative = QComboBox()
        for label, value in SPECULATIVE_CHOICES:
            self.speculative.addItem(label, value)
        self.speculative.setCurrentIndex(max(0, self.speculative.findData(settings.speculative)))
        hform.addRow("Speculative decoding", self.speculative)
        hform.addRow(_hint(SPECULATIVE_HINT))
        self.deterministic = QCheckBox("Same answer every time")
        self.deterministic.setChecked(settings.deterministic)
        self.deterministic.setToolTip(
            "A reply at temperature 0 (or with a seed) is the same whether other requests run beside it or not.\n"
            "Each request is computed on its own and nothing is guessed ahead, so several at once run slower."
        )
        hform.addRow("", self.deterministic)

        hub = QGroupBox("Hugging Face Hub")
        hub_form = QFormLayout(hub)
        self.hf_token = QLineEdit(settings.hf_token)
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setPlaceholderText("hf_…")
        hub_form.addRow("Access token", self.hf_token)
        self.token_note = _hint()
        hub_form.addRow(self.token_note)
        self.hf_endpoint = QLineEdit(settings.hf_endpoint)
        self.hf_endpoint.setPlaceholderText(DEFAULT_ENDPOINT)
        hub_form.addRow("Endpoint / mirror", self.hf_endpoint)
        self.endpoint_note = _hint()
        hub_form.addRow(self.endpoint_note)
        self.hf_token.textChanged.connect(self._show_in_effect)
        self.hf_endpoint.textChanged.connect(self._show_in_effect)
        self._show_in_effect()
        self.parallel_downloads = QSpinBox()
        self.parallel_downloads.setRange(1, 8)
        self.parallel_downloads.setValue(settings.parallel_downloads)
        hub_form.addRow("Parallel downloads", self.parallel_downloads)
        tools = self._tools_group(settings)
        documents_group = self._documents_group(settings, documents or ModelChoices())
        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.error.setVisible(False)

        # Plain buttons, as everywhere else in Hearth: the platform's standard ones can carry stock icons.
        buttons = QDialogButtonBox()
        self.save_button = buttons.addButton("Save", QDialogButtonBox.ButtonRole.AcceptRole)
        self.save_button.setProperty("role", "primary")
        self.save_button.setDefault(True)
        self.cancel_button = buttons.addButton("Cancel", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        # The groups scroll on a short screen rather than squeeze their hints; the buttons stay in view.
        body = QWidget()
        groups = QVBoxLayout(body)
        groups.setContentsMargins(0, 0, 0, 0)
        groups.addWidget(general)
        groups.addWidget(hardware)
        groups.addWidget(hub)
        groups.addWidget(documents_group)
        groups.addWidget(tools)
        groups.addWidget(self.error)
        groups.addStretch(1)  # spare height goes below the groups, not into the Hardware box
        scroll = scrolling(body, horizontal=False)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)
        # Open showing every group where the screen is tall enough (a scroll area alone asks for little).
        want = body.sizeHint().height() + buttons.sizeHint().height() + 3 * layout.spacing() + 24
        screen = self.screen()
        if screen is not None:
            want = min(want, int(screen.availableGeometry().height() * 0.9))
        self.resize(max(self.sizeHint().width(), body.sizeHint().width() + 40), want)

    def _tools_group(self, settings: Settings) -> QGroupBox:
        """MCP servers: where they are kept, importing another program's, and how far a reply may go."""
        group = QGroupBox("Tools (MCP servers)")
        form = QFormLayout(group)
        self.mcp_servers = _hint()
        form.addRow("Servers", self.mcp_servers)
        self.mcp_list = McpServerList(self._paths.config, parent=group)  # add, edit, remove (mcp_editor.py)
        self.mcp_list.changed.connect(self._show_mcp_servers)
        form.addRow(self.mcp_list)
        form.addRow(
            _hint(
                f"Kept in {self._paths.config / CONFIG_NAME}, in the format LM Studio, Cursor and Claude"
                " Desktop use. Turn a server on for a chat with its Tools button."
            )
        )
        imports = QHBoxLayout()
        choose = QPushButton("Import…")
        choose.clicked.connect(self._choose_mcp_file)
        imports.addWidget(choose)
        for program, path in known_config_files():
            found = QPushButton(f"Import {program}'s")
            found.setToolTip(str(path))
            found.clicked.connect(lambda _c=False, p=path: self.import_mcp(p))
            imports.addWidget(found)
        imports.addStretch(1)
        form.addRow(imports)
        self.tool_steps = QSpinBox()
        self.tool_steps.setRange(1, 100)
        self.tool_steps.setValue(settings.tool_steps)
        form.addRow("Tool steps in one reply", self.tool_steps)
        self._show_mcp_servers()
        return group

    def _documents_group(self, settings: Settings, choices: ModelChoices) -> QGroupBox:
        """The embedding model new collections use, the reranker searches use, and watched folders."""
        group = QGroupBox("Documents")
        form = QFormLayout(group)
        chosen = settings.documents
        self.embedding_model = _model_combo(EMBEDDING_AUTO, choices.embedding, chosen.embedding_model)
        form.addRow("Embedding model", self.embedding_model)
        self.reranker = _model_combo(RERANKER_NONE, choices.rerankers, chosen.reranker)
        form.addRow("Reranker", self.reranker)
        self.watch_folders = QCheckBox("Watch folders added to collections")
        self.watch_folders.setToolTip("Files saved, changed or deleted in them are indexed again while Hearth runs")
        self.watch_folders.setChecked(chosen.watch_folders)
        form.addRow("", self.watch_folders)
        form.addRow(_hint(DOCUMENTS_HINT))
        return group

    def _show_mcp_servers(self, note: str = "") -> None:
        try:
            names = list(load_config(self._paths.config / CONFIG_NAME).servers)
        except McpConfigError as exc:
            self.mcp_servers.setText(str(exc))
            return
        listed = ", ".join(names) if names else "none yet"
        self.mcp_servers.setText(f"{note}{listed}")

    def _choose_mcp_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", str(Path.home()), "JSON (*.json)")
        if name:
            self.import_mcp(Path(name))

    def import_mcp(self, path: Path) -> None:
        """Bring in another program's servers (their secrets go to the keyring or a private file)."""
        config = self._paths.config
        try:
            done = import_servers(config, path, SecretStore.for_config(config))
        except McpConfigError as exc:
            self.mcp_servers.setText(str(exc))
            return
        kept = f" (kept as they were: {', '.join(done.kept)})" if done.kept else ""
        self.mcp_list.refresh()
        self._show_mcp_servers(f"Imported {len(done.added)}{kept}. Now: ")

    def _show_in_effect(self, *_: object) -> None:
        self.token_note.setText(token_in_effect(self.hf_token.text(), self._env))
        self.endpoint_note.setText(endpoint_in_effect(self.hf_endpoint.text(), self._env))

    def _browse(self) -> None:
        start = self.models_dir.text() or str(self._paths.models)
        folder = existing_folder(self, "Models folder", start)
        if folder:
            self.models_dir.setText(folder)

    def edited(self) -> Settings:
        """The settings as edited, validated by the model."""
        return self._settings.model_copy(
            update={
                "models_dir": self._models_dir(),
                "log_level": self.log_level.currentText(),
                "theme": self.theme.currentData(),
                "measure_bandwidth_on_start": self.measure_bw.isChecked(),
                "hf_token": self.hf_token.text(),
                "hf_endpoint": self.hf_endpoint.text(),
                "parallel_downloads": self.parallel_downloads.value(),
                "speculative": self.speculative.currentData(),
                "deterministic": self.deterministic.isChecked(),
                "tool_steps": self.tool_steps.value(),
                "documents": self._settings.documents.model_copy(
                    update={
                        "embedding_model": self.embedding_model.currentData() or "",
                        "reranker": self.reranker.currentData() or "",
                        "watch_folders": self.watch_folders.isChecked(),
                    }
                ),
            }
        )

    def _models_dir(self) -> str:
        """The setting for the folder shown: "" while it is the default one, so it follows the data dir."""
        text = self.models_dir.text().strip()
        return "" if not text or os.path.normpath(text) == os.path.normpath(str(self._paths.models)) else text

    def open_server_settings(self) -> None:
        """Close (saving what was edited here, if anything) and show the Server page's settings."""
        if self.edited() != self._settings:
            self.setResult(QDialog.DialogCode.Rejected)
            self.accept()
            if self.result() != QDialog.DialogCode.Accepted:  # an edit the settings refuse: stay, and say why
                return
        else:
            self.reject()
        if self._show_server_settings is not None:
            self._show_server_settings()

    def accept(self) -> None:
        try:
            self._settings = Settings.model_validate(self.edited().model_dump())
        except ValidationError as exc:
            # Stay open and say what is wrong rather than save a setting the app cannot use.
            self.error.setText("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()))
            self.error.setVisible(True)
            return
        self._store.save(self._settings)
        super().accept()

    @property
    def settings(self) -> Settings:
        return self._settings
