"""OpenAI's vector stores over Hearth's collections: a vector store IS a collection, so one made over the API
shows on the Documents page and one made there is listed by the API.

Ids are stable strings derived from the store: a collection's vector store id is "vs_<collection id>"; an
uploaded file keeps its "file-<hex>" id in every store it is added to; a file the window added (not uploaded)
is "file-local-<its row id>". What the collections' tables do not hold is kept in tables of their own in the
documents database, each row removed with its collection (ON DELETE CASCADE): a store's metadata, the files
added over the API with their attributes, and file batches.

A file's status is read from its state in the collection: pending and indexing are "in_progress", indexed
is "completed", skipped and failed are "failed" with the reason as `last_error`. Adding a file is
`Documents.add`, so it is indexed on the documents thread like any file added in the window.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.core.documents.filters import Attributes, FilterError, checked_attributes, compile_filter
from app.core.documents.parsing import SUPPORTED_SUFFIXES
from app.core.documents.search import RRF_K, Hit
from app.core.documents.service import Documents
from app.core.documents.store import FAILED, INDEXED, SKIPPED, Collection, DocumentsError, FileRow
from app.core.documents.uploads import UploadedFile, Uploads, connected

STORE_PREFIX = "vs_"
LOCAL_FILE_PREFIX = "file-local-"
BATCH_PREFIX = "vsfb_"
MAX_METADATA = 16
MAX_RESULTS = 50
# Candidates read before a filter on attributes is applied: the whole fused list (50 each way, search.py), so
# filtering after the search loses nothing a filter inside it would have kept.
FILTERED_POOL = 100
# The best fused score a passage can have (first in both lists): scores are reported over it, in 0..1.
BEST_FUSED = 2.0 / (RRF_K + 1)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_stores(
    collection INTEGER PRIMARY KEY REFERENCES collections(id) ON DELETE CASCADE,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS api_store_files(
    collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    file_id TEXT NOT NULL,
    attributes TEXT NOT NULL DEFAULT '{}',
    created INTEGER NOT NULL,
    PRIMARY KEY(collection, path)
);
CREATE TABLE IF NOT EXISTS api_batches(
    id TEXT PRIMARY KEY,
    collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    file_ids TEXT NOT NULL,
    created INTEGER NOT NULL
);
"""


class NotFound(DocumentsError):
    """No such vector store, file or batch; `param` names the id's field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StoreFile:
    """A file of a vector store as the API describes it."""

    id: str
    store_id: str
    filename: str
    path: Path
    created_at: int
    usage_bytes: int
    status: str  # in_progress, completed, failed
    last_error: dict[str, str] | None
    attributes: Attributes


@dataclass(frozen=True)
class VectorStore:
    id: str
    name: str
    created_at: int
    embedding_model: str
    usage_bytes: int
    metadata: dict[str, str]
    file_counts: dict[str, int]
    last_active_at: int

    @property
    def status(self) -> str:
        return "in_progress" if self.file_counts["in_progress"] else "completed"


@dataclass(frozen=True)
class Batch:
    id: str
    store_id: str
    created_at: int
    files: list[StoreFile]

    @property
    def file_counts(self) -> dict[str, int]:
        return counts(self.files)

    @property
    def status(self) -> str:
        return "in_progress" if self.file_counts["in_progress"] else "completed"


@dataclass(frozen=True)
class SearchResult:
    file_id: str
    filename: str
    score: float  # 0..1, higher is better
    attributes: Attributes
    hit: Hit  # the passage, for a prompt that cites it
    store_id: str = ""

    @property
    def text(self) -> str:
        return self.hit.text


@dataclass
class _Listing:
    """One collection's files as the API sees them, read once for a listing."""

    collection: Collection
    rows: dict[Path, FileRow]
    added: dict[Path, tuple[str, Attributes, int]]  # path -> (file id, attributes, created) for API adds
    uploads: dict[Path, UploadedFile] = field(default_factory=dict)


def store_id(collection: Collection) -> str:
    """`vs_<collection id>_<its creation time, µs, hex>`: SQLite gives a deleted collection's id to the next
    one made, and the time keeps a client's old id from naming the new collection."""
    return f"{STORE_PREFIX}{collection.id}_{int(collection.created * 1e6):x}"


def counts(files: Sequence[StoreFile]) -> dict[str, int]:
    out = {"in_progress": 0, "completed": 0, "failed": 0, "cancelled": 0}
    for f in files:
        out[f.status] += 1
    return {**out, "total": len(files)}


class VectorStores:
    """The API's view of the documents: any thread (each call reads the store afresh)."""

    def __init__(self, documents: Documents, uploads: Uploads) -> None:
        self.documents = documents
        self.uploads = uploads
        self.db_path = documents.store.db_path
        with connected(self.db_path) as db:
            db.executescript(_SCHEMA)

    @classmethod
    def over(cls, documents: Documents, uploads: Path | None = None) -> VectorStores:
        """The API's view of `documents`, uploads kept in `uploads` (default: beside its database)."""
        db = documents.store.db_path
        return cls(documents, Uploads(db, uploads or db.parent / "uploads"))

    # -- stores ---------------------------------------------------------------------------------------------

    def collection(self, vs_id: str, param: str = "vector_store_id") -> Collection:
        number = vs_id[len(STORE_PREFIX) :].partition("_")[0] if vs_id.startswith(STORE_PREFIX) else ""
        found = self.documents.store.collection_by_id(int(number)) if number.isdigit() and len(number) < 12 else None
        if found is None or store_id(found) != vs_id:
            raise NotFound(f"No vector store found with id {vs_id[:100]!r}.", param)
        return found

    def create(self, name: str | None, metadata: dict[str, str] | None = None, model: str | None = None) -> VectorStore:
        """A new store (collection) under `name`, made unique with " (2)", " (3)"… as collections' names must
        be; embedded with `model`, else the one Documents picks. Raises NoEmbeddingModel, DocumentsError."""
        metadata = checked_metadata(metadata)
        base = (name or "").strip() or f"Vector store {time.strftime('%Y-%m-%d %H:%M:%S')}"
        taken = {c.name.lower() for c in self.documents.collections()}
        unique, n = base[:190], 2
        while unique.lower() in taken:
            unique, n = f"{base[:190]} ({n})", n + 1
        collection = self.documents.create(unique, model)
        if metadata:
            self._set_metadata(collection.id, metadata)
        return self.describe(collection)

    def all(self) -> list[VectorStore]:
        return [self.describe(c) for c in self.documents.collections()]

    def get(self, vs_id: str) -> VectorStore:
        return self.describe(self.collection(vs_id))

    def update(self, vs_id: str, name: str | None = None, metadata: dict[str, str] | None = None) -> VectorStore:
        collection = self.collection(vs_id)
        if name is not None and name.strip() and name.strip() != collection.name:
            collection = self.documents.rename(collection.name, name)
        if metadata is not None:
            self._set_metadata(collection.id, checked_metadata(metadata))
        return self.describe(collection)

    def delete(self, vs_id: str) -> None:
        self.documents.delete(self.collection(vs_id).name)

    def describe(self, collection: Collection) -> VectorStore:
        files = self._files(self._listing(collection))
        latest = max([int(collection.created), *(f.created_at for f in files)])
        return VectorStore(
            store_id(collection),
            collection.name,
            int(collection.created),
            collection.model,
            collection.bytes,
            self._metadata(collection.id),
            counts(files),
            latest,
        )

    # -- files ----------------------------------------------------------------------------------------------

    def add_file(self, vs_id: str, file_id: str, attributes: object = None, param: str = "file_id") -> StoreFile:
        """Add an uploaded file to a store (indexed in the background); adding it again sets its attributes."""
        collection = self.collection(vs_id)
        self._add(collection, [(file_id, checked_attributes(attributes))], param)
        return self.file(vs_id, file_id)

    def _add(self, collection: Collection, files: Sequence[tuple[str, Attributes]], param: str) -> None:
        uploads = []
        for i, (file_id, _attrs) in enumerate(files):
            upload = self.uploads.get(file_id)
            if upload is None:
                where = param if len(files) == 1 else f"{param}.{i}"
                raise NotFound(f"No file found with id {file_id[:100]!r}.", where)
            uploads.append(upload)
        now = int(time.time())
        with connected(self.db_path) as db:
            for upload, (_fid, attrs) in zip(uploads, files, strict=True):
                db.execute(
                    "INSERT INTO api_store_files(collection, path, file_id, attributes, created) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT(collection, path) DO UPDATE SET attributes = excluded.attributes",
                    (collection.id, str(upload.path), upload.id, json.dumps(attrs), now),
                )
        self.documents.add(collection.name, [u.path for u in uploads])

    def files(self, vs_id: str, status: str | None = None) -> list[StoreFile]:
        files = self._files(self._listing(self.collection(vs_id)))
        return [f for f in files if status is None or f.status == status]

    def file(self, vs_id: str, file_id: str) -> StoreFile:
        for f in self.files(vs_id):
            if f.id == file_id:
                return f
        raise NotFound(f"No file with id {file_id[:100]!r} in vector store {vs_id[:100]!r}.", "file_id")

    def passages(self, vs_id: str, file_id: str) -> list[str]:
        """The text of a file's passages as indexed, in order (none until it is)."""
        found = self.file(vs_id, file_id)
        row = self.documents.store.file(self.collection(vs_id).id, found.path)
        if row is None:
            return []
        with connected(self.db_path) as db:
            return [r[0] for r in db.execute("SELECT text FROM passages WHERE file = ? ORDER BY ordinal", (row.id,))]

    def set_attributes(self, vs_id: str, file_id: str, attributes: object) -> StoreFile:
        found = self.file(vs_id, file_id)
        attrs = checked_attributes(attributes)
        collection = self.collection(vs_id)
        with connected(self.db_path) as db:
            db.execute(
                "INSERT INTO api_store_files(collection, path, file_id, attributes, created) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(collection, path) DO UPDATE SET attributes = excluded.attributes",
                (collection.id, str(found.path), found.id, json.dumps(attrs), found.created_at),
            )
        return self.file(vs_id, file_id)

    def remove_file(self, vs_id: str, file_id: str) -> None:
        """Take a file out of a store: its passages go; an uploaded file stays uploaded."""
        found = self.file(vs_id, file_id)
        collection = self.collection(vs_id)
        with connected(self.db_path) as db:
            db.execute(
                "DELETE FROM api_store_files WHERE collection = ? AND path = ?", (collection.id, str(found.path))
            )
        self.documents.remove(collection.name, [found.path])

    def delete_upload(self, file_id: str) -> bool:
        """Delete an uploaded file: out of every store it is in first, then its bytes. False if unknown."""
        upload = self.uploads.get(file_id)
        if upload is None:
            return False
        with connected(self.db_path) as db:
            held = [
                int(r[0]) for r in db.execute("SELECT collection FROM api_store_files WHERE file_id = ?", (file_id,))
            ]
            db.execute("DELETE FROM api_store_files WHERE file_id = ?", (file_id,))
        for cid in held:
            collection = self.documents.store.collection_by_id(cid)
            if collection is not None:
                self.documents.remove(collection.name, [upload.path])
        self.uploads.delete(file_id)
        return True

    # -- batches --------------------------------------------------------------------------------------------

    def create_batch(self, vs_id: str, files: Sequence[tuple[str, object]]) -> Batch:
        collection = self.collection(vs_id)
        checked = [(fid, checked_attributes(a, f"files.{i}.attributes")) for i, (fid, a) in enumerate(files)]
        self._add(collection, checked, "file_ids")
        batch_id = BATCH_PREFIX + secrets.token_hex(12)
        with connected(self.db_path) as db:
            db.execute(
                "INSERT INTO api_batches(id, collection, file_ids, created) VALUES (?, ?, ?, ?)",
                (batch_id, collection.id, json.dumps([f for f, _ in checked]), int(time.time())),
            )
        return self.batch(vs_id, batch_id)

    def batch(self, vs_id: str, batch_id: str) -> Batch:
        collection = self.collection(vs_id)
        with connected(self.db_path) as db:
            row = db.execute(
                "SELECT * FROM api_batches WHERE id = ? AND collection = ?", (batch_id, collection.id)
            ).fetchone()
        if row is None:
            raise NotFound(f"No file batch found with id {batch_id[:100]!r}.", "batch_id")
        wanted = json.loads(row["file_ids"])
        files = {f.id: f for f in self._files(self._listing(collection))}
        return Batch(row["id"], store_id(collection), int(row["created"]), [files[f] for f in wanted if f in files])

    # -- search ---------------------------------------------------------------------------------------------

    def search(
        self,
        vs_ids: Sequence[str],
        queries: Sequence[str],
        *,
        limit: int = 10,
        filters: object = None,
        rerank: bool = True,
        score_threshold: float = 0.0,
        param: str = "vector_store_id",
    ) -> list[SearchResult]:
        """The `limit` best passages for any of `queries` in the stores, among files whose attributes pass
        `filters`, scoring at least `score_threshold`. Raises NotFound, FilterError, EmbeddingFailed."""
        collections = [self.collection(v, param) for v in dict.fromkeys(vs_ids)]
        keep = compile_filter(filters)
        limit = max(1, min(limit, MAX_RESULTS))
        pool = FILTERED_POOL if filters is not None else limit
        reranked = rerank and self.documents.reranker() is not None
        listings = {c.name: self._listing(c) for c in collections}
        best: dict[int, SearchResult] = {}
        for query in queries:
            if not query.strip():
                continue
            for hit in self.documents.search_collections(query, collections, limit=pool, rerank=rerank):
                listing = listings.get(hit.collection)
                if listing is None:
                    continue
                file_id, filename, attributes = self._identity(listing, hit.file)
                if not keep(attributes):
                    continue
                score = _sigmoid(hit.score) if reranked else min(1.0, hit.score / BEST_FUSED)
                if score < score_threshold:
                    continue
                if hit.passage not in best or best[hit.passage].score < score:
                    best[hit.passage] = SearchResult(
                        file_id, filename, round(score, 6), attributes, hit, store_id(listing.collection)
                    )
        return sorted(best.values(), key=lambda r: -r.score)[:limit]

    # -- reading --------------------------------------------------------------------------------------------

    def _listing(self, collection: Collection) -> _Listing:
        rows = {f.path: f for f in self.documents.store.files(collection.id)}
        with connected(self.db_path) as db:
            added = {
                Path(r["path"]): (r["file_id"], json.loads(r["attributes"]), int(r["created"]))
                for r in db.execute("SELECT * FROM api_store_files WHERE collection = ?", (collection.id,))
            }
        return _Listing(collection, rows, added, self.uploads.by_paths() if added else {})

    def _identity(self, listing: _Listing, path: Path) -> tuple[str, str, Attributes]:
        """(file id, filename, attributes) of a path in a collection."""
        added = listing.added.get(path)
        upload = listing.uploads.get(path)
        row = listing.rows.get(path)
        file_id = added[0] if added else f"{LOCAL_FILE_PREFIX}{row.id if row else 0}"
        return file_id, upload.filename if upload else path.name, added[1] if added else {}

    def _files(self, listing: _Listing) -> list[StoreFile]:
        """Every file of the collection: those added over the API (before the indexer has found them too),
        then the window's."""
        stalled = self._stalled(listing.collection)
        out = []
        for path in [*listing.added, *(p for p in listing.rows if p not in listing.added)]:
            row = listing.rows.get(path)
            file_id, filename, attributes = self._identity(listing, path)
            created = listing.added[path][2] if path in listing.added else int(row.mtime if row else 0)
            status, error = _status(path, row, stalled)
            size = row.size if row else (listing.uploads[path].bytes if path in listing.uploads else 0)
            out.append(
                StoreFile(
                    file_id, store_id(listing.collection), filename, path, created, size, status, error, attributes
                )
            )
        return out

    def _stalled(self, collection: Collection) -> str | None:
        """Why indexing of this collection stopped (its model failed), while nothing is running it; else None."""
        status = self.documents.status
        prefix = f"{collection.name}: "
        if (
            status.error
            and status.error.startswith(prefix)
            and collection.name
            not in (
                status.collection,
                *status.queued,
            )
        ):
            return status.error[len(prefix) :]
        return None

    def _metadata(self, collection: int) -> dict[str, str]:
        with connected(self.db_path) as db:
            row = db.execute("SELECT metadata FROM api_stores WHERE collection = ?", (collection,)).fetchone()
        return json.loads(row[0]) if row else {}

    def _set_metadata(self, collection: int, metadata: dict[str, str]) -> None:
        with connected(self.db_path) as db:
            db.execute(
                "INSERT INTO api_stores(collection, metadata) VALUES (?, ?)"
                " ON CONFLICT(collection) DO UPDATE SET metadata = excluded.metadata",
                (collection, json.dumps(metadata)),
            )


def checked_metadata(metadata: object) -> dict[str, str]:
    """OpenAI's metadata: at most 16 string keys (64 characters) and string values (512)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA:
        raise FilterError(f"metadata must be an object of at most {MAX_METADATA} keys", "metadata")
    for key, value in metadata.items():
        if not isinstance(key, str) or not 0 < len(key) <= 64 or not isinstance(value, str) or len(value) > 512:
            raise FilterError("metadata keys are 1 to 64 characters and values strings of at most 512", "metadata")
    return dict(metadata)


def _status(path: Path, row: FileRow | None, stalled: str | None) -> tuple[str, dict[str, str] | None]:
    if row is not None and row.state == INDEXED:
        return "completed", None
    if row is not None and row.state == SKIPPED:
        return "failed", {"code": "unsupported_file", "message": row.reason or "not a document Hearth can read"}
    if row is not None and row.state == FAILED:
        return "failed", {"code": "invalid_file", "message": row.reason or "the file could not be read"}
    if row is None and path.suffix.lower() not in SUPPORTED_SUFFIXES:  # the indexer never lists it
        kinds = ", ".join(sorted(SUPPORTED_SUFFIXES))
        return "failed", {"code": "unsupported_file", "message": f"Hearth reads only these kinds of file: {kinds}"}
    if stalled is not None:
        return "failed", {"code": "server_error", "message": stalled}
    return "in_progress", None


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, x))))
