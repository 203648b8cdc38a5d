"""Settings dialog: edits the `Settings` model; later features add their own sections."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.paths import AppPaths
from app.core.settings import Settings, SettingsStore


class SettingsDialog(QDialog):
    def __init__(self, store: SettingsStore, settings: Settings, paths: AppPaths, parent: QWidget | None = None):
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

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(general)
        layout.addWidget(hardware)
        layout.addWidget(buttons)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Models folder", self.models_dir.text() or str(self._paths.models))
        if folder:
            self.models_dir.setText(folder)

    def edited(self) -> Settings:
        """The settings as edited, validated by the model."""
        return self._settings.model_copy(
            update={
                "models_dir": self.models_dir.text().strip(),
                "log_level": self.log_level.currentText(),
                "measure_bandwidth_on_start": self.measure_bw.isChecked(),
            }
        )

    def accept(self) -> None:
        self._settings = Settings.model_validate(self.edited().model_dump())
        self._store.save(self._settings)
        super().accept()

    @property
    def settings(self) -> Settings:
        return self._settings
