"""Per-user directories. `HEARTH_HOME` overrides every one of them (tests always set it).

Chat history, the library, settings and logs are the user's alone: Hearth's folders are 0700 and its
databases 0600 on POSIX (other local users could read 0644 files), whatever the umask says (T36).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

logger = logging.getLogger(__name__)

APP_NAME = "Hearth"
HOME_ENV = "HEARTH_HOME"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# What SQLite writes beside a database; it creates them with the database file's own mode.
SQLITE_SIBLINGS = ("-wal", "-shm", "-journal")


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
    def documents_db(self) -> Path:
        """Document collections: their files, passages and vectors (documents/store.py)."""
        return self.data / "documents.sqlite3"

    @property
    def uploads(self) -> Path:
        """Files uploaded over the API (/v1/files), each 0600 in a folder of its own (documents/uploads.py)."""
        return self.data / "uploads"

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
        """Create the folders: Hearth's own private (an older install's 0755 ones too); the models folder
        as any other (it may be one the user chose, and weights are not secrets)."""
        for p in (self.config, self.data, self.logs, self.cache):
            private_dir(p, tighten=True)
        self.models.mkdir(parents=True, exist_ok=True)
        return self


def private_dir(path: Path, *, tighten: bool = False) -> Path:
    """Create `path` (parents as usual) 0700; with `tighten`, an existing `path` loses its group and other
    bits too (only for Hearth's own folders, never one a user chose)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if tighten:
        _owner_only(path)
    return path


def private_database(path: Path) -> Path:
    """Make the SQLite database `path` (created empty if missing: SQLite takes an empty file as a new
    database) and the -wal/-shm/-journal files beside it readable by their owner only. SQLite creates
    those siblings with the database's mode, so one 0600 database keeps them all 0600."""
    if os.name != "posix":  # NTFS permissions come from the (per-user) profile folder
        return path
    try:
        # O_CREAT without O_TRUNC: an existing database is opened, never emptied.
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, PRIVATE_FILE)
        os.close(fd)
    except OSError as exc:  # SQLite's own open says what is wrong, in the store's words
        logger.debug("could not create %s ahead of SQLite: %s", path, exc)
        return path
    for p in (path, *(path.with_name(path.name + s) for s in SQLITE_SIBLINGS)):
        _owner_only(p)
    return path


def open_private(path: Path, mode: str = "a") -> TextIO:
    """Open the text file `path` for appending ("a") or writing ("w") as the user's alone: created 0600
    whatever the umask, an older install's 0644 one tightened. For files Hearth writes bit by bit (a
    server's log, a marker); whole files go through atomic.py, whose temp files are 0600 already."""
    if mode not in ("a", "w"):
        raise ValueError(f"open_private writes or appends, not {mode!r}")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE)
    _owner_only(path)
    return open(fd, "a", encoding="utf-8") if mode == "a" else open(fd, "w", encoding="utf-8")


def _owner_only(path: Path) -> None:
    """Drop group and other permission bits from `path`, if it exists (a failure is logged, not raised:
    a file Hearth cannot chmod it can usually still use)."""
    if os.name != "posix":
        return
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            os.chmod(path, mode & ~0o077)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not make %s private to its owner: %s", path, exc)


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
