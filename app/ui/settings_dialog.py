"""Settings dialog: edits the `Settings` model; later features add their own sections."""

from __future__ import annotations

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

from app.core.paths import AppPaths
from app.core.settings import Settings, SettingsStore


class SettingsDialog(QDialog):
    def __init__(
        self, store: SettingsStore, settings: Settings, paths: AppPaths, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._store = store
        self._settings = settings
        self._paths = paths

        general = QGroupBox("General")
        form = QFormLayout(general)
        self.models_dir = QLineEdit(settings.models_dir)
        self.models_dir.setPlaceholderText(str(paths.models))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.models_dir, 1)
        row.addWidget(browse)
        form.addRow("Models folder", row)
        self.log_level = QComboBox()
        self.log_level.addItems(["DEBUG", "INFO", "WARNING", "ERROR"])
        self.log_level.setCurrentText(settings.log_level)
        form.addRow("Log level", self.log_level)

        hardware = QGroupBox("Hardware")
        hform = QFormLayout(hardware)
        self.measure_bw = QCheckBox("Measure memory bandwidth on first start (about 0.2 s, cached)")
        self.measure_bw.setChecked(settings.measure_bandwidth_on_start)
        hform.addRow(self.measure_bw)

        hub = QGroupBox("Hugging Face Hub")
        hub_form = QFormLayout(hub)
        self.hf_token = QLineEdit(settings.hf_token)
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setPlaceholderText("hf_… (needed for gated and private models; else HF_TOKEN)")
        hub_form.addRow("Access token", self.hf_token)
        self.hf_endpoint = QLineEdit(settings.hf_endpoint)
        self.hf_endpoint.setPlaceholderText("https://huggingface.co (or a mirror; else HF_ENDPOINT)")
        hub_form.addRow("Endpoint / mirror", self.hf_endpoint)
        self.parallel_downloads = QSpinBox()
        self.parallel_downloads.setRange(1, 8)
        self.parallel_downloads.setValue(settings.parallel_downloads)
        hub_form.addRow("Parallel downloads", self.parallel_downloads)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b3261e;")
        self.error.setVisible(False)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(general)
        layout.addWidget(hardware)
        layout.addWidget(hub)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _browse(self) -> None:
        start = self.models_dir.text() or str(self._paths.models)
        folder = QFileDialog.getExistingDirectory(self, "Models folder", start)
        if folder:
            self.models_dir.setText(folder)

    def edited(self) -> Settings:
        """The settings as edited, validated by the model."""
        return self._settings.model_copy(
            update={
                "models_dir": self.models_dir.text().strip(),
                "log_level": self.log_level.currentText(),
                "measure_bandwidth_on_start": self.measure_bw.isChecked(),
                "hf_token": self.hf_token.text(),
                "hf_endpoint": self.hf_endpoint.text(),
                "parallel_downloads": self.parallel_downloads.value(),
            }
        )

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
