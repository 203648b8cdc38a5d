"""The documents database: collections, their files and sources, and the passages with their vectors.

One SQLite file in the data folder (0600, like the chat history). Passages are searched two ways: FTS5 gives
BM25 over their words, and their vectors (float32, normalized) are read into one matrix per collection and
scanned exactly (search.py says why not an extension). A file's passages are written batch by batch as they
are embedded, with the file marked "indexing" and its content hash; after a quit or a crash, a file whose
hash still matches resumes at the first passage not stored, so nothing is embedded twice.

Thread-safe: the indexer's thread writes, any thread reads; one connection behind a lock.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.documents.passages import Passage
from app.core.paths import private_database, private_dir

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

# A file's states. "pending": found, not read yet; "indexing": its passages are being stored;
# "indexed": all stored; "skipped": not a document (why in `reason`); "failed": could not be read.
PENDING, INDEXING, INDEXED, SKIPPED, FAILED = "pending", "indexing", "indexed", "skipped", "failed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,  -- "Notes" and "notes" are one collection
    model TEXT NOT NULL,          -- the embedding model's library name
    dims INTEGER,                 -- its vectors' width, set by the first passage
    created REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 0   -- bumped on every change to its passages (search's cache key)
);
CREATE TABLE IF NOT EXISTS sources(
    id INTEGER PRIMARY KEY,
    collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,           -- a file or a folder the user added; folders are watched
    added REAL NOT NULL,
    UNIQUE(collection, path)
);
CREATE TABLE IF NOT EXISTS excluded(
    collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,           -- a file the user removed from a watched folder: not found again
    UNIQUE(collection, path)
);
CREATE TABLE IF NOT EXISTS files(
    id INTEGER PRIMARY KEY,
    collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL DEFAULT 0,
    mtime REAL NOT NULL DEFAULT 0,
    sha256 TEXT,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    pages INTEGER,
    passages INTEGER NOT NULL DEFAULT 0,  -- stored so far
    total INTEGER,                -- what the file cuts into, once read
    indexed REAL,
    UNIQUE(collection, path)
);
CREATE TABLE IF NOT EXISTS passages(
    id INTEGER PRIMARY KEY,
    file INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    collection INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    page INTEGER,
    heading TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    vector BLOB NOT NULL,
    UNIQUE(file, ordinal)
);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
    text, heading, content='passages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS passages_ai AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
END;
CREATE TRIGGER IF NOT EXISTS passages_ad AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, old.heading);
END;
CREATE INDEX IF NOT EXISTS passages_by_collection ON passages(collection);
"""


_COUNTED = (
    "SELECT c.*, (SELECT COUNT(*) FROM files f WHERE f.collection = c.id) AS n_files,"
    " (SELECT COUNT(*) FROM passages p WHERE p.collection = c.id) AS n_passages,"
    " (SELECT COALESCE(SUM(LENGTH(p.text) + LENGTH(p.vector)), 0) FROM passages p"
    "  WHERE p.collection = c.id) AS n_bytes FROM collections c"
)


class DocumentsError(Exception):
    """A request the store refuses (no such collection, a name taken); str() says why."""


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    model: str
    dims: int | None
    created: float
    files: int = 0
    passages: int = 0
    bytes: int = 0  # the passages' text and vectors as stored


@dataclass(frozen=True)
class FileRow:
    id: int
    collection: int
    path: Path
    size: int
    mtime: float
    sha256: str | None
    state: str
    reason: str
    pages: int | None
    passages: int
    total: int | None


@dataclass(frozen=True)
class WholeFile:
    """A small file's every passage with its vectors, stored with others in one transaction."""

    file_id: int
    passages: Sequence[Passage]
    vectors: np.ndarray
    reason: str  # the reader's note, if any ("3 of 5 sheets read")
    size: int
    mtime: float


@dataclass(frozen=True)
class StoredPassage:
    id: int
    collection: int
    file: Path
    ordinal: int
    page: int | None
    heading: str
    text: str


class DocumentStore:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        private_dir(db_path.parent)
        private_database(db_path)  # what the user's documents say: 0600, -wal and -shm too
        self._db = sqlite3.connect(db_path, check_same_thread=False, timeout=10, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # The index is derived from files that stay on disk: a commit need not wait for an fsync (after a
            # power cut the last batches are embedded again). With FULL, a batch's fsync on a slow disk held
            # the engine's next job for seconds (bench/documents.py: 2 s stalls, indexing at 0.23 of the engine).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _q(self, sql: str, args: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- collections --------------------------------------------------------------------------------------

    def create_collection(self, name: str, model: str) -> Collection:
        name = name.strip()
        if not name:
            raise DocumentsError("a collection needs a name")
        if len(name) > 200:
            raise DocumentsError("a collection's name is at most 200 characters")
        try:
            with self._tx() as db:
                db.execute("INSERT INTO collections(name, model, created) VALUES (?, ?, ?)", (name, model, time.time()))
        except sqlite3.IntegrityError:
            raise DocumentsError(f"a collection named {name!r} already exists") from None
        return self.collection(name)

    def collections(self) -> list[Collection]:
        """Every collection with its counts and size (a scan of its passages: for listings, not lookups)."""
        return [_collection(r) for r in self._q(_COUNTED + " ORDER BY c.name")]

    def find_collection(self, name: str) -> Collection | None:
        rows = self._q(_COUNTED + " WHERE c.name = ?", (name.strip(),))  # the column compares without case
        return _collection(rows[0]) if rows else None

    def collection(self, name: str) -> Collection:
        found = self.find_collection(name)
        if found is None:
            known = ", ".join(c.name for c in self.collections()) or "none yet"
            raise DocumentsError(f"no collection named {name!r} (collections: {known})")
        return found

    def collection_names(self) -> dict[int, str]:
        """Each collection's name by id, without counting its passages (what status lines need)."""
        return {int(r["id"]): r["name"] for r in self._q("SELECT id, name FROM collections")}

    def collection_by_id(self, collection: int) -> Collection | None:
        rows = self._q(_COUNTED + " WHERE c.id = ?", (collection,))
        return _collection(rows[0]) if rows else None

    def rename_collection(self, name: str, new_name: str) -> Collection:
        c = self.collection(name)
        new_name = new_name.strip()
        if not new_name:
            raise DocumentsError("a collection needs a name")
        try:
            with self._tx() as db:
                db.execute("UPDATE collections SET name = ? WHERE id = ?", (new_name, c.id))
        except sqlite3.IntegrityError:
            raise DocumentsError(f"a collection named {new_name!r} already exists") from None
        return self.collection(new_name)

    def delete_collection(self, name: str) -> None:
        c = self.collection(name)
        with self._tx() as db:
            # passages first: their FTS trigger needs the rows; files and sources go by cascade
            db.execute("DELETE FROM passages WHERE collection = ?", (c.id,))
            db.execute("DELETE FROM collections WHERE id = ?", (c.id,))

    def set_model(self, collection: int, model: str) -> None:
        """Change the embedding model: every vector is the old model's, so every file is read again."""
        with self._tx() as db:
            db.execute("DELETE FROM passages WHERE collection = ?", (collection,))
            db.execute(
                "UPDATE files SET state = ?, passages = 0, total = NULL, sha256 = NULL"
                " WHERE collection = ? AND state != ?",
                (PENDING, collection, SKIPPED),
            )
            db.execute(
                "UPDATE collections SET model = ?, dims = NULL, version = version + 1 WHERE id = ?", (model, collection)
            )

    def version(self, collection: int) -> int:
        rows = self._q("SELECT version FROM collections WHERE id = ?", (collection,))
        return int(rows[0]["version"]) if rows else -1

    # -- sources and files --------------------------------------------------------------------------------

    def add_source(self, collection: int, path: Path) -> None:
        """A file or folder added (again): what was excluded at or under it is found again."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO sources(collection, path, added) VALUES (?, ?, ?)",
                (collection, str(path), time.time()),
            )
            for row in db.execute("SELECT path FROM excluded WHERE collection = ?", (collection,)).fetchall():
                if Path(row["path"]) == path or path in Path(row["path"]).parents:
                    db.execute("DELETE FROM excluded WHERE collection = ? AND path = ?", (collection, row["path"]))

    def exclude(self, collection: int, path: Path) -> None:
        """A file inside a watched folder that the user removed: its passages go and a sync skips it."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO excluded(collection, path) VALUES (?, ?)", (collection, str(path)))
        self.remove_files(collection, [path])

    def excluded(self, collection: int) -> set[Path]:
        return {Path(r["path"]) for r in self._q("SELECT path FROM excluded WHERE collection = ?", (collection,))}

    def sources(self, collection: int) -> list[Path]:
        return [
            Path(r["path"]) for r in self._q("SELECT path FROM sources WHERE collection = ? ORDER BY id", (collection,))
        ]

    def remove_source(self, collection: int, path: Path) -> int:
        """Forget a source and every file found under it; the number of files removed."""
        with self._tx() as db:
            db.execute("DELETE FROM sources WHERE collection = ? AND path = ?", (collection, str(path)))
        gone = [f for f in self.files(collection) if f.path == path or path in f.path.parents]
        self.remove_files(collection, [f.path for f in gone])
        return len(gone)

    def files(self, collection: int, state: str | None = None) -> list[FileRow]:
        sql = "SELECT * FROM files WHERE collection = ?"
        args: list[object] = [collection]
        if state is not None:
            sql += " AND state = ?"
            args.append(state)
        return [_file(r) for r in self._q(sql + " ORDER BY path", args)]

    def file(self, collection: int, path: Path) -> FileRow | None:
        rows = self._q("SELECT * FROM files WHERE collection = ? AND path = ?", (collection, str(path)))
        return _file(rows[0]) if rows else None

    def mark_found_many(self, collection: int, found: Iterable[tuple[Path, int, float]]) -> None:
        """Files seen on disk (path, size, mtime): a new one, or one whose size or time changed since it was
        read, waits to be read (its hash decides then whether it really changed). One transaction."""
        with self._tx() as db:
            known = {
                r["path"]: (r["size"], r["mtime"], r["state"])
                for r in db.execute("SELECT path, size, mtime, state FROM files WHERE collection = ?", (collection,))
            }
            for path, size, mtime in found:
                row = known.get(str(path))
                if row is None:
                    db.execute(
                        "INSERT INTO files(collection, path, size, mtime, state) VALUES (?, ?, ?, ?, ?)",
                        (collection, str(path), size, mtime, PENDING),
                    )
                elif (row[0], row[1]) != (size, mtime) and row[2] != INDEXING:
                    db.execute(
                        "UPDATE files SET size = ?, mtime = ?, state = ? WHERE collection = ? AND path = ?",
                        (size, mtime, PENDING, collection, str(path)),
                    )

    def remove_files(self, collection: int, paths: Iterable[Path]) -> None:
        with self._tx() as db:
            for path in paths:
                row = db.execute(
                    "SELECT id FROM files WHERE collection = ? AND path = ?", (collection, str(path))
                ).fetchone()
                if row is None:
                    continue
                db.execute("DELETE FROM passages WHERE file = ?", (row["id"],))
                db.execute("DELETE FROM files WHERE id = ?", (row["id"],))
            db.execute("UPDATE collections SET version = version + 1 WHERE id = ?", (collection,))

    def set_state(
        self,
        file_id: int,
        state: str,
        reason: str = "",
        *,
        sha256: str | None = None,
        pages: int | None = None,
        size: int | None = None,
        mtime: float | None = None,
    ) -> None:
        sets: list[str] = ["state = ?", "reason = ?"]
        args: list[object] = [state, reason]
        for col, val in (("sha256", sha256), ("pages", pages), ("size", size), ("mtime", mtime)):
            if val is not None:
                sets.append(f"{col} = ?")
                args.append(val)
        if state == INDEXED:
            sets.append("indexed = ?")
            args.append(time.time())
        with self._tx() as db:
            db.execute(f"UPDATE files SET {', '.join(sets)} WHERE id = ?", (*args, file_id))

    def start_file(self, file_id: int, sha256: str, pages: int | None, total: int) -> int:
        """Mark the file "indexing" at this content, cut into `total` passages. A file stopped half-way with
        the same hash keeps the passages it has; any other loses them. Returns how many are kept."""
        with self._tx() as db:
            row = db.execute("SELECT sha256, total, collection FROM files WHERE id = ?", (file_id,)).fetchone()
            if row is None:
                raise DocumentsError("the file was removed from its collection")
            if row["sha256"] != sha256 or row["total"] != total:
                db.execute("DELETE FROM passages WHERE file = ?", (file_id,))
                db.execute("UPDATE collections SET version = version + 1 WHERE id = ?", (row["collection"],))
            kept = db.execute("SELECT COUNT(*) FROM passages WHERE file = ?", (file_id,)).fetchone()[0]
            db.execute(
                "UPDATE files SET state = ?, reason = '', sha256 = ?, pages = ?, total = ?, passages = ? WHERE id = ?",
                (INDEXING, sha256, pages, total, kept, file_id),
            )
        return int(kept)

    def add_passages(self, collection: int, file_id: int, passages: Sequence[Passage], vectors: np.ndarray) -> None:
        """Store embedded passages of a file in one transaction (the unit a crash can lose)."""
        with self._tx() as db:
            self._insert_passages(db, collection, file_id, passages, vectors)
            db.execute("UPDATE collections SET version = version + 1 WHERE id = ?", (collection,))

    def add_whole_files(self, collection: int, files: Sequence[WholeFile]) -> None:
        """Store small files' passages, each file whole and then "indexed", in one transaction: a folder of
        many short notes costs one commit per batch of them, not three per file."""
        now = time.time()
        with self._tx() as db:
            for f in files:
                self._insert_passages(db, collection, f.file_id, f.passages, f.vectors)
                db.execute(
                    "UPDATE files SET state = ?, reason = ?, size = ?, mtime = ?, indexed = ? WHERE id = ?",
                    (INDEXED, f.reason, f.size, f.mtime, now, f.file_id),
                )
            db.execute("UPDATE collections SET version = version + 1 WHERE id = ?", (collection,))

    @staticmethod
    def _insert_passages(
        db: sqlite3.Connection, collection: int, file_id: int, passages: Sequence[Passage], vectors: np.ndarray
    ) -> None:
        if len(passages) != len(vectors):
            raise ValueError("one vector per passage")
        vectors = _normalized(vectors)
        row = db.execute("SELECT dims FROM collections WHERE id = ?", (collection,)).fetchone()
        dims = vectors.shape[1]
        if row["dims"] is None:
            db.execute("UPDATE collections SET dims = ? WHERE id = ?", (dims, collection))
        elif row["dims"] != dims:
            raise DocumentsError(f"the model gave vectors of {dims} numbers; this collection holds {row['dims']}")
        db.executemany(
            "INSERT INTO passages(file, collection, ordinal, page, heading, text, vector) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (file_id, collection, p.ordinal, p.page, p.heading, p.text, v.astype("<f4").tobytes())
                for p, v in zip(passages, vectors, strict=True)
            ],
        )
        db.execute("UPDATE files SET passages = passages + ? WHERE id = ?", (len(passages), file_id))

    # -- reading passages ---------------------------------------------------------------------------------

    def vectors(self, collection: int) -> tuple[np.ndarray, np.ndarray]:
        """(passage ids, their vectors as one float32 matrix) of a collection."""
        rows = self._q("SELECT id, vector FROM passages WHERE collection = ? ORDER BY id", (collection,))
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        ids = np.fromiter((r["id"] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), -1)
        return ids, matrix

    def keyword_search(self, collections: Sequence[int], match: str, limit: int) -> list[tuple[int, float]]:
        """(passage id, bm25) best first for an FTS5 `match` expression, within `collections`."""
        marks = ",".join("?" * len(collections))
        rows = self._q(
            "SELECT passages_fts.rowid AS id, bm25(passages_fts) AS score FROM passages_fts"
            " JOIN passages p ON p.id = passages_fts.rowid"
            f" WHERE passages_fts MATCH ? AND p.collection IN ({marks}) ORDER BY score LIMIT ?",
            (match, *collections, limit),
        )
        return [(int(r["id"]), float(r["score"])) for r in rows]

    def passages(self, ids: Sequence[int]) -> dict[int, StoredPassage]:
        out: dict[int, StoredPassage] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for r in self._q(
                "SELECT p.id, p.collection, p.ordinal, p.page, p.heading, p.text, f.path FROM passages p"
                f" JOIN files f ON f.id = p.file WHERE p.id IN ({marks})",
                chunk,
            ):
                out[int(r["id"])] = StoredPassage(
                    int(r["id"]),
                    int(r["collection"]),
                    Path(r["path"]),
                    r["ordinal"],
                    r["page"],
                    r["heading"],
                    r["text"],
                )
        return out


def _normalized(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2:
        raise ValueError("vectors must be a matrix, one row per passage")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def _collection(r: sqlite3.Row) -> Collection:
    return Collection(
        int(r["id"]),
        r["name"],
        r["model"],
        r["dims"],
        float(r["created"]),
        int(r["n_files"]),
        int(r["n_passages"]),
        int(r["n_bytes"]),
    )


def _file(r: sqlite3.Row) -> FileRow:
    return FileRow(
        int(r["id"]),
        int(r["collection"]),
        Path(r["path"]),
        int(r["size"]),
        float(r["mtime"]),
        r["sha256"],
        r["state"],
        r["reason"],
        r["pages"],
        int(r["passages"]),
        r["total"],
    )
