"""Per-user directories. `HEARTH_HOME` overrides every one of them (tests always set it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

APP_NAME = "Hearth"
HOME_ENV = "HEARTH_HOME"


@dataclass(frozen=True)
class AppPaths:
    config: Path
    data: Path
    models: Path
    logs: Path
    cache: Path

    @property
    def settings_file(self) -> Path:
        return self.config / "settings.json"

    @property
    def library_db(self) -> Path:
        return self.data / "library.db"

    @property
    def chats_db(self) -> Path:
        return self.data / "chats.sqlite3"

    @property
    def downloads_state(self) -> Path:
        return self.data / "downloads.json"

    @property
    def responses_file(self) -> Path:
        """Stored API responses, written only when the user keeps them across restarts."""
        return self.data / "api-responses.json"

    @property
    def calibration_file(self) -> Path:
        return self.cache / "calibration.json"

    def ensure(self) -> AppPaths:
        for p in (self.config, self.data, self.models, self.logs, self.cache):
            p.mkdir(parents=True, exist_ok=True)
        return self


def app_paths(env: Mapping[str, str] | None = None) -> AppPaths:
    """Resolve Hearth's directories (not created; call `.ensure()`)."""
    home = (os.environ if env is None else env).get(HOME_ENV)
    if home:
        root = Path(home).expanduser().resolve()
        return AppPaths(
            config=root / "config",
            data=root / "data",
            models=root / "models",
            logs=root / "logs",
            cache=root / "cache",
        )
    import platformdirs

    dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
    data = Path(dirs.user_data_dir)
    return AppPaths(
        config=Path(dirs.user_config_dir),
        data=data,
        models=data / "models",
        logs=Path(dirs.user_log_dir),
        cache=Path(dirs.user_cache_dir),
    )
