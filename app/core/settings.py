"""One settings model, saved atomically as JSON under the config dir."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.core.atomic import atomic_write_text
from app.core.events import Event
from app.core.paths import AppPaths

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class WindowState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    geometry: str = ""  # base64 of QWidget.saveGeometry(); opaque to core
    page: str = "hardware"


class Settings(BaseModel):
    # Unknown keys from a newer Hearth are dropped, not fatal: a downgrade must still start.
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    schema_version: int = SCHEMA_VERSION
    models_dir: str = ""  # empty: the default models folder under the data dir
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    measure_bandwidth_on_start: bool = True
    window: WindowState = Field(default_factory=WindowState)
    hf_endpoint: str = ""  # empty: HF_ENDPOINT, else the public Hub
    hf_token: str = ""  # empty: HF_TOKEN, else anonymous
    parallel_downloads: int = Field(default=2, ge=1, le=8)

    @field_validator("hf_endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not value.lower().startswith(("http://", "https://")):
            raise ValueError("the Hub endpoint must be an http:// or https:// URL")
        if any(c.isspace() for c in value):
            raise ValueError("the Hub endpoint must not contain spaces")
        return value

    @field_validator("hf_token")
    @classmethod
    def _check_token(cls, value: str) -> str:
        value = value.strip()
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("the Hub token must not contain spaces or control characters")
        return value

    def models_path(self, paths: AppPaths) -> Path:
        return Path(self.models_dir).expanduser() if self.models_dir else paths.models


class SettingsStore:
    """Loads and saves `Settings`; `changed` fires on the thread that calls `save`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.changed: Event[Settings] = Event("settings.changed")

    def load(self) -> Settings:
        if not self.path.exists():
            return Settings()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return Settings.model_validate(raw)
        except (OSError, ValueError, ValidationError) as exc:
            # Keep the unreadable file for the user rather than overwrite it silently.
            backup = self.path.with_suffix(".json.bad")
            try:
                self.path.replace(backup)
            except OSError:
                pass
            logger.warning(
                "settings file %s unreadable (%s); using defaults, kept it as %s", self.path, exc, backup.name
            )
            return Settings()

    def save(self, settings: Settings) -> None:
        atomic_write_text(self.path, settings.model_dump_json(indent=2) + "\n")
        self.changed.emit(settings)
