"""The Server page's settings card: the fields of `ServerSettings`, checked by the model itself, so an
invalid edit shows pydantic's words and nothing is saved. Saving is the page's job."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import AUTO_PARALLEL, DEFAULT_PARALLEL_REQUESTS, OLLAMA_PORT, ServerSettings
from app.ui.server_model import PARALLEL_HINT, bounds, parallel_text, settings_bounds
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

LAN_WARNING = (
    "LAN mode lets any device on your network reach this API and use your models. "
    "Every request then needs the API key, whatever the box below says."
)
OLLAMA_PORT_HINT = (
    f"For tools that only know Ollama's address (http://localhost:{OLLAMA_PORT}): Hearth answers there too, "
    "with the same key, origins and routes, unless Ollama itself is running."
)


def validation_text(exc: ValidationError) -> str:
    return "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())


def _spin(name: str, suffix: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(*bounds(name))
    box.setSuffix(suffix)
    return box


class ServerSettingsForm(QFrame):
    def __init__(
        self, settings: ServerSettings, parent: QWidget | None = None, parallel: int = DEFAULT_PARALLEL_REQUESTS
    ) -> None:
        """`parallel`: the app's Parallel requests (the chat's too, not only the server's), edited here only."""
        super().__init__(parent)
        self.setObjectName("card")
        self._loaded = settings  # what the form last showed: Revert returns to it, `dirty` compares with it
        self._loaded_parallel = parallel
        self._loopback_require = settings.require_api_key
        title = QLabel("Settings")
        title.setObjectName("cardTitle")
        self.port = _spin("port")
        self.port.setGroupSeparatorShown(False)
        self.bind = QComboBox()
        self.bind.addItem("This computer only (127.0.0.1)", "loopback")
        self.bind.addItem("Local network (LAN)", "lan")
        self.bind.currentIndexChanged.connect(self._bind_changed)
        self.lan_warning = QLabel(LAN_WARNING)
        self.lan_warning.setWordWrap(True)
        set_status(self.lan_warning, "warning")
        self.require_key = QCheckBox("Require the API key on this computer too")
        self.require_key.toggled.connect(self._require_toggled)
        self.origins = QPlainTextEdit()
        self.origins.setPlaceholderText("http://localhost:3000\n(one per line; empty: no web page may call the API)")
        self.origins.setFixedHeight(64)
        self.start_with_app = QCheckBox("Start the server when Hearth starts")
        self.keep_in_tray = QCheckBox("Keep serving from the tray when the window is closed")
        self.jit = QCheckBox("Load a model when a request asks for one that is not loaded")
        self.jit.setToolTip(
            "Just-in-time (JIT) loading: a request that names a model in My Models loads it first, beside the"
            " loaded ones or in place of the least recently used. Off: such a request is refused."
        )
        self.idle = _spin("idle_ttl_minutes", " min")
        self.idle.setSpecialValueText("Never")  # shown at the minimum, 0
        self.queue = _spin("queue_size", " requests")
        self.max_models = _spin("max_loaded_models", " models")
        self.max_models.setSpecialValueText("As many as fit")  # shown at the minimum, 0
        self.max_models.setToolTip(
            "Models kept loaded at once; when a new one needs room, the least recently used unpinned one is "
            "unloaded first. As many as fit: memory alone decides."
        )
        self.parallel = QSpinBox()
        self.parallel.setRange(*settings_bounds("parallel_requests"))
        self.parallel.setSuffix(" at once")
        self.parallel.setSpecialValueText(parallel_text(AUTO_PARALLEL))  # shown at the minimum, 0
        self.parallel.setToolTip(PARALLEL_HINT)
        # The one place it is edited (Settings only shows it), so its explanation is in view, not only a tooltip.
        self.parallel_hint = QLabel(PARALLEL_HINT)
        self.parallel_hint.setObjectName("hint")
        self.parallel_hint.setWordWrap(True)
        self.jit_context = _spin("jit_context", " tokens")
        self.jit_context.setSingleStep(4096)
        self.jit_context.setSpecialValueText("The largest that fits")  # 0: up to the model's trained length
        self.jit_context.setToolTip(
            "The context a model loaded for an API request asks for; Hearth lowers it to what fits this machine.\n"
            "The largest that fits: the model loads at its usual context (8,192 tokens) and grows, once, when a "
            "request needs more, up to the largest that fits."
        )
        self.keep_responses = QCheckBox("Keep stored responses (previous_response_id) across restarts")
        self.ollama_port = QCheckBox(f"Also answer on Ollama's port {OLLAMA_PORT}")
        self.ollama_port.setToolTip(OLLAMA_PORT_HINT)
        self.fetch_images = QCheckBox("Fetch images that requests name by URL")
        self.fetch_images.setToolTip(
            "Off: a request's images must be sent as data (base64). On: Hearth downloads an http(s) image URL a"
            " request names, up to 20 MiB and 10 seconds, from any address this computer can reach."
        )
        self.ollama_hint = QLabel(OLLAMA_PORT_HINT)
        self.ollama_hint.setObjectName("hint")
        self.ollama_hint.setWordWrap(True)

        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("Listen on", self.bind)
        form.addRow(self.lan_warning)
        form.addRow(self.require_key)
        form.addRow("Allowed web origins", self.origins)
        form.addRow(self.start_with_app)
        form.addRow(self.keep_in_tray)
        form.addRow(self.jit)
        form.addRow("Context when a request loads it", self.jit_context)
        form.addRow("Unload an idle model after", self.idle)
        form.addRow("Models loaded at once", self.max_models)
        form.addRow("Parallel requests", self.parallel)
        form.addRow(self.parallel_hint)
        form.addRow("Queue size", self.queue)
        form.addRow(self.keep_responses)
        form.addRow(self.fetch_images)
        form.addRow(self.ollama_port)
        form.addRow(self.ollama_hint)

        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.save_button = QPushButton("Save")
        self.revert_button = QPushButton("Revert")
        self.revert_button.clicked.connect(lambda: self.load(self._loaded, self._loaded_parallel))
        buttons = QHBoxLayout()
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.revert_button)
        buttons.addWidget(self.note, 1)

        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        layout.addStretch(1)
        self.load(settings, parallel)

    def load(self, settings: ServerSettings, parallel: int | None = None) -> None:
        """Show `settings` (after a save, or when they changed elsewhere and nothing here is edited);
        `parallel` None keeps the Parallel requests last loaded."""
        self._loaded = settings
        if parallel is not None:
            self._loaded_parallel = parallel
        self.parallel.setValue(self._loaded_parallel)
        self._loopback_require = settings.require_api_key
        self.port.setValue(settings.port)
        self.bind.setCurrentIndex(max(0, self.bind.findData(settings.bind)))
        self.origins.setPlainText("\n".join(settings.cors_origins))
        self.start_with_app.setChecked(settings.start_with_app)
        self.keep_in_tray.setChecked(settings.keep_serving_in_tray)
        self.jit.setChecked(settings.jit_load)
        self.idle.setValue(settings.idle_ttl_minutes)
        self.max_models.setValue(settings.max_loaded_models)
        self.queue.setValue(settings.queue_size)
        self.jit_context.setValue(settings.jit_context)
        self.keep_responses.setChecked(settings.keep_responses)
        self.fetch_images.setChecked(settings.fetch_image_urls)
        self.ollama_port.setChecked(settings.ollama_port)
        self._bind_changed()
        self.show_error("")

    def _bind_changed(self, *_: object) -> None:
        lan = self.bind.currentData() == "lan"
        self.lan_warning.setVisible(lan)
        # LAN mode always needs the key: show it ticked and fixed, and keep the loopback choice for later.
        self.require_key.blockSignals(True)
        self.require_key.setChecked(lan or self._loopback_require)
        self.require_key.blockSignals(False)
        self.require_key.setEnabled(not lan)

    def _require_toggled(self, on: bool) -> None:
        if self.bind.currentData() != "lan":
            self._loopback_require = on

    def values(self) -> dict:
        return {
            "port": self.port.value(),
            "bind": self.bind.currentData(),
            "require_api_key": self._loopback_require,
            "cors_origins": [line.strip() for line in self.origins.toPlainText().splitlines() if line.strip()],
            "start_with_app": self.start_with_app.isChecked(),
            "keep_serving_in_tray": self.keep_in_tray.isChecked(),
            "jit_load": self.jit.isChecked(),
            "idle_ttl_minutes": self.idle.value(),
            "max_loaded_models": self.max_models.value(),
            "queue_size": self.queue.value(),
            "jit_context": self.jit_context.value(),
            "keep_responses": self.keep_responses.isChecked(),
            "fetch_image_urls": self.fetch_images.isChecked(),
            "ollama_port": self.ollama_port.isChecked(),
        }

    def edited(self, base: ServerSettings) -> ServerSettings:
        """`base` with this form's values, validated; raises pydantic's ValidationError."""
        return ServerSettings.model_validate({**base.model_dump(), **self.values()})

    @property
    def dirty(self) -> bool:
        """Whether the form differs from what it last loaded."""
        loaded = self._loaded.model_dump()
        edited = any(loaded[name] != value for name, value in self.values().items())
        return edited or self.parallel.value() != self._loaded_parallel

    def show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(bool(text))
