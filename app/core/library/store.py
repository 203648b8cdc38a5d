"""The local model library: one SQLite (WAL) row per model Hearth can run, downloaded or imported in place."""

from __future__ import annotations

import builtins
import json
import logging
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.downloads.partial import hash_file
from app.core.events import Event
from app.core.formats import GGUF
from app.core.models.errors import ModelFileError
from app.core.paths import private_database, private_dir

logger = logging.getLogger(__name__)

READY, QUARANTINED, MISSING = "ready", "quarantined", "missing"
SOURCES = ("download", "import", "hf-cache", "lmstudio", "ollama")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    format TEXT NOT NULL,
    quant TEXT,
    size INTEGER NOT NULL,
    path TEXT NOT NULL UNIQUE,
    files TEXT NOT NULL,
    repo_id TEXT,
    revision TEXT,
    source TEXT NOT NULL,
    added_at REAL NOT NULL,
    last_used_at REAL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
"""
_COLUMNS = (
    "id, name, format, quant, size, path, files, repo_id, revision, source, added_at, last_used_at, status, reason"
)


@dataclass(frozen=True)
class ModelFile:
    path: Path  # absolute
    size: int
    sha256: str | None = None


@dataclass(frozen=True)
class LocalModel:
    id: str
    name: str
    format: str  # "gguf" | "mlx"
    quant: str | None
    size: int
    path: Path  # what an engine loads: the (first) GGUF file, or the MLX folder
    files: tuple[ModelFile, ...]
    repo_id: str | None
    commit: str | None
    source: str
    added_at: float
    last_used_at: float | None
    status: str
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.status == READY


def _row(r: sqlite3.Row) -> LocalModel:
    files = tuple(ModelFile(Path(f["path"]), int(f["size"]), f.get("sha256")) for f in json.loads(r["files"]))
    return LocalModel(
        r["id"],
        r["name"],
        r["format"],
        r["quant"],
        r["size"],
        Path(r["path"]),
        files,
        r["repo_id"],
        r["revision"],
        r["source"],
        r["added_at"],
        r["last_used_at"],
        r["status"],
        r["reason"],
    )


def _inside(path: Path, folder: Path) -> bool:
    """True when `path` (not following a final symlink) lies inside `folder`."""
    try:
        parent = Path(os.path.realpath(path.parent))
        return (parent / path.name).is_relative_to(Path(os.path.realpath(folder)))
    except OSError:
        return False


class Library:
    """Thread-safe; `changed` fires (with the affected id, or None for many) after every mutation."""

    def __init__(self, models_dir: str | os.PathLike[str], db_path: str | os.PathLike[str]) -> None:
        self.models_dir = Path(models_dir).expanduser().absolute()
        self.db_path = Path(db_path)
        private_dir(self.db_path.parent)
        private_database(self.db_path)  # what the user runs and imported from where: 0600, -wal and -shm too
        self.changed: Event[str | None] = Event("library.changed")
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.db_path, check_same_thread=False, timeout=10, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._unique_names()

    def _unique_names(self) -> None:
        """Give every model a name of its own (a library written before names were kept unique may hold two
        files of one name): the first added keeps it, the others are renamed as `add` names them."""
        with self._lock:
            rows = self._db.execute("SELECT id, name, path FROM models ORDER BY added_at, id").fetchall()
            seen: set[str] = set()
            for r in rows:
                if r["name"].lower() in seen:
                    name = self._unique_name(r["name"], Path(r["path"]))
                    self._db.execute("UPDATE models SET name = ? WHERE id = ?", (name, r["id"]))
                    logger.info("library: %s renamed %s, as another model has its name", r["path"], name)
                    seen.add(name.lower())
                else:
                    seen.add(r["name"].lower())

    def _unique_name(self, name: str, path: Path, old: str | None = None) -> str:
        """Under the lock: `name` if no other model (another path) has it, else `name (FOLDER)` with the
        file's folder, else `name (2)`, `(3)`…; a model that already has one of these keeps it, so names stay
        stable. The API's model ids are these names: two files of one name (a model and its vision copy)
        would be two entries with one id."""
        taken = {
            r["name"].lower()
            for r in self._db.execute("SELECT name FROM models WHERE path != ?", (str(path),)).fetchall()
        }
        folder = path.parent.name if path.parent.name else ""
        candidates = [name] + ([f"{name} ({folder})"] if folder else []) + [f"{name} ({n})" for n in range(2, 1000)]
        if old is not None and old in candidates and old.lower() not in taken:
            return old
        return next((c for c in candidates if c.lower() not in taken), f"{name} ({uuid.uuid4().hex[:6]})")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- reads ----

    def list(self, status: str | None = None) -> list[LocalModel]:
        """Every model (or those with `status`), most recently used first."""
        with self._lock:
            sql = f"SELECT {_COLUMNS} FROM models"
            args: tuple = ()
            if status is not None:
                sql, args = sql + " WHERE status = ?", (status,)
            rows = self._db.execute(sql + " ORDER BY COALESCE(last_used_at, added_at) DESC, name", args).fetchall()
        return [_row(r) for r in rows]

    def get(self, model_id: str) -> LocalModel | None:
        with self._lock:
            r = self._db.execute(f"SELECT {_COLUMNS} FROM models WHERE id = ?", (model_id,)).fetchone()
        return _row(r) if r else None

    def find(self, name: str) -> LocalModel | None:
        """By id, display name, `repo:QUANT`, `repo` (when it has one entry) or path; ready entries win ties."""
        name = name.strip()
        models = self.list()
        models.sort(key=lambda m: not m.ready)
        if hit := self.get(name):
            return hit
        lowered = name.lower()
        for match in (
            lambda m: m.name.lower() == lowered,
            lambda m: bool(m.repo_id) and f"{m.repo_id}:{m.quant or ''}".lower() == lowered,
            lambda m: _same_path(m, name),
        ):
            hits = [m for m in models if match(m)]
            if hits:
                return hits[0]
        by_repo = [m for m in models if m.repo_id and m.repo_id.lower() == lowered]
        return by_repo[0] if len({m.id for m in by_repo}) == 1 else None

    def total_size(self, status: str | None = None) -> int:
        return sum(m.size for m in self.list(status))

    # ---- writes ----

    def add(
        self,
        *,
        name: str,
        format: str,
        path: str | os.PathLike[str],
        files: Sequence[ModelFile],
        quant: str | None = None,
        repo_id: str | None = None,
        commit: str | None = None,
        source: str = "import",
        status: str = READY,
        reason: str = "",
    ) -> LocalModel:
        """Insert or replace the entry for `path` (one row per loadable path)."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}")
        if status not in (READY, QUARANTINED, MISSING):
            raise ValueError(f"unknown status {status!r}")
        path = Path(path).absolute()
        files_json = json.dumps(
            [{"path": str(Path(f.path).absolute()), "size": int(f.size), "sha256": f.sha256} for f in files]
        )
        size = sum(int(f.size) for f in files)
        now = time.time()
        with self._lock:
            old = self._db.execute(
                "SELECT id, name, added_at, last_used_at FROM models WHERE path = ?", (str(path),)
            ).fetchone()
            model_id = old["id"] if old else uuid.uuid4().hex[:12]
            name = self._unique_name(name, path, old["name"] if old else None)
            self._db.execute(
                f"INSERT OR REPLACE INTO models ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    model_id,
                    name,
                    format,
                    quant,
                    size,
                    str(path),
                    files_json,
                    repo_id,
                    commit,
                    source,
                    old["added_at"] if old else now,
                    old["last_used_at"] if old else None,
                    status,
                    reason,
                ),
            )
        logger.info("library: %s %s (%s, %s)", "updated" if old else "added", name, source, status)
        self.changed.emit(model_id)
        return self.get(model_id)  # type: ignore[return-value]

    def add_download(
        self,
        *,
        repo_id: str,
        commit: str,
        format: str,
        quant: str | None,
        files: Sequence[ModelFile],
        path: str | os.PathLike[str] | None = None,
        name: str | None = None,
        verified: bool = True,
        reason: str = "",
    ) -> LocalModel:
        """Record a downloaded variant. Files must lie inside the models folder; unverified ones are quarantined.

        `path` defaults to the first file (GGUF) or the folder of the files (MLX/EXL2).
        """
        if not files:
            raise ValueError("a downloaded model has at least one file")
        for f in files:
            if not _inside(Path(f.path), self.models_dir):
                raise ValueError(f"{f.path} is outside the models folder {self.models_dir}")
        if path is None:
            path = files[0].path if format == GGUF else Path(files[0].path).parent
        label = name or f"{repo_id.split('/')[-1]}{':' + quant if quant else ''}"
        return self.add(
            name=label,
            format=format,
            path=path,
            files=files,
            quant=quant,
            repo_id=repo_id,
            commit=commit,
            source="download",
            status=READY if verified else QUARANTINED,
            reason="" if verified else (reason or "failed verification"),
        )

    def quarantine(self, model_id: str, reason: str) -> None:
        self._set_status(model_id, QUARANTINED, reason)

    def touch(self, model_id: str) -> None:
        """Record that the model was just used."""
        with self._lock:
            self._db.execute("UPDATE models SET last_used_at = ? WHERE id = ?", (time.time(), model_id))
        self.changed.emit(model_id)

    def _set_status(self, model_id: str, status: str, reason: str = "") -> None:
        with self._lock:
            self._db.execute("UPDATE models SET status = ?, reason = ? WHERE id = ?", (status, reason, model_id))
        logger.info("library: %s is now %s %s", model_id, status, reason)
        self.changed.emit(model_id)

    def delete(self, model_id: str, delete_files: bool = True, *, delete_imported: bool = False) -> int:
        """Forget a model; returns the bytes freed.

        Files inside the models folder are deleted when `delete_files`; files imported in place elsewhere only
        when `delete_imported` as well (the user asked for it explicitly). Symlinks are unlinked, never followed.
        """
        model = self.get(model_id)
        if model is None:
            raise KeyError(model_id)
        freed = 0
        if delete_files:
            # A file another model also lists (two quants of a repo share its F16 projector) stays.
            shared = {f.path for other in self.list() if other.id != model_id for f in other.files}
            for f in model.files:
                inside = _inside(f.path, self.models_dir)
                if f.path not in shared and (inside or delete_imported):
                    freed += _remove(f.path)
            if model.format != GGUF and _inside(model.path, self.models_dir) and model.path != self.models_dir:
                _prune_empty(model.path, self.models_dir)
            for f in model.files:
                if _inside(f.path, self.models_dir):
                    _prune_empty(f.path.parent, self.models_dir)
        with self._lock:
            self._db.execute("DELETE FROM models WHERE id = ?", (model_id,))
        logger.info("library: removed %s, freed %d bytes", model.name, freed)
        self.changed.emit(model_id)
        return freed

    def refresh(self) -> builtins.list[LocalModel]:  # `list` is a method here
        """Re-check files on disk: vanished → missing, size changed → quarantined, back again → ready."""
        changed = False
        for m in self.list():
            status, reason = m.status, m.reason
            gone = [f.path.name for f in m.files if not f.path.exists()]
            resized = [f.path.name for f in m.files if f.path.exists() and f.path.stat().st_size != f.size]
            if gone:
                status, reason = MISSING, f"missing: {', '.join(gone)}"
            elif resized:
                status, reason = QUARANTINED, f"size changed: {', '.join(resized)}"
            elif m.status == MISSING:
                status, reason = READY, ""
            if (status, reason) != (m.status, m.reason):
                with self._lock:
                    self._db.execute("UPDATE models SET status = ?, reason = ? WHERE id = ?", (status, reason, m.id))
                changed = True
        if changed:
            self.changed.emit(None)
        return self.list()

    def verify(self, model_id: str) -> bool:
        """Re-hash every file with a known sha256; a mismatch quarantines the model. True when all match."""
        model = self.get(model_id)
        if model is None:
            raise KeyError(model_id)
        for f in model.files:
            if f.sha256 is None:
                continue
            try:
                actual = hash_file(f.path, f.sha256)
            except OSError as exc:
                self._set_status(model_id, MISSING, f"cannot read {f.path.name}: {exc.strerror or exc}")
                return False
            if actual != f.sha256:
                self._set_status(model_id, QUARANTINED, f"{f.path.name} does not match its sha256")
                return False
        if model.status != READY:
            self._set_status(model_id, READY)
        return True


def _same_path(m: LocalModel, text: str) -> bool:
    try:
        p = Path(text).expanduser().absolute()
    except (OSError, ValueError, RuntimeError):  # RuntimeError: "~nobody", a home that does not exist
        return False
    paths = [m.path, *(f.path for f in m.files)]
    if p in paths:
        return True
    # The pool names a loaded model by its resolved path: an entry imported through a symlinked folder is the same
    # file (else /api/ps and the model lists leave a loaded model out).
    try:
        real = p.resolve()
        return any(real == q.resolve() for q in paths)
    except (OSError, ValueError, RuntimeError):  # a loop of links; ValueError: a NUL in a name from a request
        return False


def _remove(path: Path) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    os.unlink(path)
    return 0 if stat.S_ISLNK(st.st_mode) else st.st_size


def _prune_empty(folder: Path, root: Path) -> None:
    """Remove now-empty folders from `folder` up to (not including) `root`."""
    root = Path(os.path.realpath(root))
    folder = Path(os.path.realpath(folder))
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def files_of(paths: Iterable[Path], sha256: dict[str, str] | None = None) -> list[ModelFile]:
    """ModelFile records (absolute path, size from disk) for paths that exist."""
    out = []
    for p in paths:
        p = Path(p).absolute()
        try:
            size = p.stat().st_size
        except OSError as exc:
            raise ModelFileError(f"cannot read {p}: {exc.strerror or exc}") from exc
        out.append(ModelFile(p, size, (sha256 or {}).get(p.name)))
    return out


def open_library(paths=None, settings=None) -> Library:
    """The user's library: models in the settings' models folder, the database in the data folder."""
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore

    paths = (paths or app_paths()).ensure()
    settings = settings or SettingsStore(paths.settings_file).load()
    models = settings.models_path(paths)
    models.mkdir(parents=True, exist_ok=True)
    return Library(models, paths.library_db)
