"""Files uploaded over the API (OpenAI's /v1/files): their bytes in the uploads folder, their records in the
documents database.

Each upload is written to `<uploads>/<file id>/<its name>`, the folder 0700 and the file 0600 whatever the
umask (T57): what a user uploads is as private as their documents. The name a client gives is reduced to one
path component before anything is written, so `../../x` or `C:\\x` can only ever name a file inside that
upload's own folder (T56); the name is kept because the documents parser reads the format from it, and a
citation shows it. The size is capped while the bytes are copied, so a file never grows past the cap on disk.

The records live in the documents database file in a table of their own; each call opens its own short
connection (SQLite connects in microseconds), so this object has nothing to close and any thread may use it.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import sqlite3
import time
import unicodedata
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.core.documents.store import DocumentsError
from app.core.paths import PRIVATE_FILE, private_dir

logger = logging.getLogger(__name__)

# The largest upload (OpenAI allows 512 MB a file): the front door streams the body within it too.
MAX_UPLOAD_BYTES = 512 * 1024 * 1024
MAX_NAME_BYTES = 200  # what is kept of a name, in UTF-8 bytes: under every file system's 255
# What OpenAI's clients send; documents need one of the first two, the rest are stored as given.
PURPOSES = ("assistants", "user_data", "batch", "fine-tune", "vision", "evals")
_COPY_CHUNK = 1024 * 1024
_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>:\"|?*]")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_files(
    id TEXT PRIMARY KEY,          -- "file-" and 24 hex digits
    filename TEXT NOT NULL,       -- the client's name, reduced to one safe component
    path TEXT NOT NULL UNIQUE,    -- where the bytes are, inside the uploads folder
    bytes INTEGER NOT NULL,
    purpose TEXT NOT NULL,
    created INTEGER NOT NULL
);
"""


class UploadRefused(DocumentsError):
    """An upload that is not stored (a bad name or purpose); str() says why."""


class UploadTooLarge(UploadRefused):
    """The upload passed the cap; what had been written is removed."""


@dataclass(frozen=True)
class UploadedFile:
    id: str
    filename: str
    bytes: int
    purpose: str
    created_at: int
    path: Path


@contextmanager
def connected(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A short connection to the documents database, one transaction (committed unless it raises)."""
    with closing(sqlite3.connect(db_path, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA foreign_keys=ON")  # the vector-store tables cascade from collections
        with db:
            yield db


def safe_name(name: str) -> str:
    """One path component made of `name`: its last part after any / or \\, without control or reserved
    characters, leading dots or trailing dots and spaces, at most MAX_NAME_BYTES (the extension kept).
    UploadRefused when nothing is left (".." or "/")."""
    last = re.split(r"[\\/]", unicodedata.normalize("NFC", name or ""))[-1]
    last = _UNSAFE.sub("_", last).strip().lstrip(".").rstrip(". ")
    if not last:
        raise UploadRefused(f"{name[:100]!r} is not a file name")
    stem, dot, ext = last.rpartition(".")
    if not dot or len(ext.encode()) > 16:
        stem, ext = last, ""
    room = MAX_NAME_BYTES - len(ext.encode()) - (1 if ext else 0)
    stem = stem.encode()[:room].decode("utf-8", "ignore").rstrip(". ") or "upload"
    return f"{stem}.{ext}" if ext else stem


class Uploads:
    """The uploaded files: any thread."""

    def __init__(self, db_path: Path, folder: Path) -> None:
        self.db_path = db_path
        self.folder = folder.absolute()  # Documents keeps absolute paths; a search hit names one
        with connected(db_path) as db:
            db.executescript(_SCHEMA)

    def save(self, source: BinaryIO, filename: str, purpose: str, *, cap: int = MAX_UPLOAD_BYTES) -> UploadedFile:
        """Store what `source` reads (to its end) as a new file. Raises UploadRefused (a name or purpose),
        UploadTooLarge (over `cap` bytes; nothing is kept)."""
        if purpose not in PURPOSES:
            raise UploadRefused(f"purpose must be one of {', '.join(PURPOSES)}, not {purpose[:40]!r}")
        name = safe_name(filename)
        file_id = "file-" + secrets.token_hex(12)
        home = private_dir(self.folder) / file_id
        home.mkdir(mode=0o700)
        path = home / name
        if path.parent != home:  # safe_name leaves one component; this holds even if that ever changes
            raise UploadRefused(f"{filename[:100]!r} is not a file name")
        size = 0
        try:
            # O_EXCL: a fresh file in a fresh folder, never one a link points elsewhere from.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), PRIVATE_FILE)
            with open(fd, "wb") as out:
                while chunk := source.read(_COPY_CHUNK):
                    size += len(chunk)
                    if size > cap:
                        raise UploadTooLarge(f"the file is larger than {cap_text(cap)}")
                    out.write(chunk)
        except BaseException:
            shutil.rmtree(home, ignore_errors=True)
            raise
        record = UploadedFile(file_id, name, size, purpose, int(time.time()), path)
        with connected(self.db_path) as db:
            db.execute(
                "INSERT INTO api_files(id, filename, path, bytes, purpose, created) VALUES (?, ?, ?, ?, ?, ?)",
                (record.id, record.filename, str(path), size, purpose, record.created_at),
            )
        logger.info("stored upload %s (%d bytes)", file_id, size)
        return record

    def get(self, file_id: str) -> UploadedFile | None:
        with connected(self.db_path) as db:
            row = db.execute("SELECT * FROM api_files WHERE id = ?", (file_id,)).fetchone()
        return _uploaded(row) if row else None

    def list(self, purpose: str | None = None) -> list[UploadedFile]:
        """Every upload (of `purpose`), oldest first."""
        sql = "SELECT * FROM api_files"
        args: tuple[str, ...] = ()
        if purpose is not None:
            sql, args = sql + " WHERE purpose = ?", (purpose,)
        with connected(self.db_path) as db:
            rows = db.execute(sql + " ORDER BY created, rowid", args).fetchall()
        return [_uploaded(r) for r in rows]

    def by_paths(self) -> dict[Path, UploadedFile]:
        """Each upload by where its bytes are (search hits name a path)."""
        return {f.path: f for f in self.list()}

    def delete(self, file_id: str) -> UploadedFile | None:
        """Forget an upload and remove its bytes; the record it was, or None."""
        found = self.get(file_id)
        if found is None:
            return None
        with connected(self.db_path) as db:
            db.execute("DELETE FROM api_files WHERE id = ?", (file_id,))
        home = found.path.parent
        if home.parent == self.folder and home.name == file_id:  # only ever the upload's own folder
            shutil.rmtree(home, ignore_errors=True)
        return found


def cap_text(cap: int) -> str:
    mib = 1024 * 1024
    return f"{cap // mib} MiB" if cap >= mib and cap % mib == 0 else f"{cap:,} bytes"


def _uploaded(r: sqlite3.Row) -> UploadedFile:
    return UploadedFile(r["id"], r["filename"], int(r["bytes"]), r["purpose"], int(r["created"]), Path(r["path"]))
