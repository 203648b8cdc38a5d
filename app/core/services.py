"""The long-lived core objects of a running Hearth, built and closed in one place (used by main.py)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from app.core.chat import ChatStore
from app.core.downloads import DownloadManager
from app.core.engines import default_registry
from app.core.library import Library
from app.core.models.calibration import CalibrationStore
from app.core.paths import AppPaths
from app.core.runtime.host import EngineHost
from app.core.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class Services:
    paths: AppPaths
    settings: Settings
    library: Library
    downloads: DownloadManager
    host: EngineHost
    chats: ChatStore
    calibration: CalibrationStore

    @classmethod
    def open(cls, paths: AppPaths, settings: Settings, *, env: dict[str, str] | None = None) -> "Services":
        env = os.environ if env is None else env
        models = settings.models_path(paths)
        models.mkdir(parents=True, exist_ok=True)
        calibration = CalibrationStore(paths.cache / "calibration.json")
        library = Library(models, paths.data / "library.db")
        downloads = DownloadManager(
            models, paths.data / "downloads.json", max_parallel=settings.parallel_downloads,
            token=settings.hf_token or env.get("HF_TOKEN") or None,
            endpoint=settings.hf_endpoint or env.get("HF_ENDPOINT") or "https://huggingface.co",
        )
        host = EngineHost(default_registry(), calibration=calibration)
        chats = ChatStore(paths.data / "chats.sqlite3")
        return cls(paths, settings, library, downloads, host, chats, calibration)

    def close(self) -> None:
        """Downloads stop first (their partials stay for the next launch), then the engine, then the stores."""
        for name, step in (("downloads", self.downloads.close), ("engine host", self.host.shutdown),
                           ("library", self.library.close), ("chats", self.chats.close)):
            try:
                step()
            except Exception:  # one failing close must not keep the others from running
                logger.exception("closing the %s failed", name)
