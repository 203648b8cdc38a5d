"""Files into passages into vectors: finding a collection's files, reading each in a child process, cutting it
and embedding it batch by batch.

A file is hashed before it is read: one whose content is what was indexed is never read or embedded again,
however its time changed. Each batch of vectors is stored as it comes (store.py), so a quit or a crash costs
at most the batch in flight and the next run resumes at the passage it stopped at. Work happens on the
caller's thread (a pool worker in the app, the main thread in the CLI) and stops between two batches when
`cancel` is set; `pause()` holds it there.

Folders are walked without following links out of them: a link inside a watched folder to a file outside it
is not read (T52), and linked folders are not entered.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from app.core.documents.parse_child import READER_NICE, ChildReader, parse_in_child
from app.core.documents.parsing import SUPPORTED_SUFFIXES, ParsedDocument, ParseError, Unsupported, parse_file
from app.core.documents.passages import Passage, cut_passages, passage_chars
from app.core.documents.store import (
    FAILED,
    INDEXED,
    INDEXING,
    PENDING,
    SKIPPED,
    Collection,
    DocumentStore,
    FileRow,
    WholeFile,
)

logger = logging.getLogger(__name__)

# Files read ahead of the one being embedded (each holds its text and passages until its turn).
READ_AHEAD = 2
# Passages embedded per job: a run starts at BATCH and then sizes each job to take about JOB_S, within
# MIN_BATCH..MAX_BATCH. A job is what a chat turn may find in flight on a shared CPU (indexing holds between
# jobs while a reply is written), and each job costs the engine a fixed hand-over: a small model on a fast
# machine embedded 16 passages a job at 0.53 of its pace 256 at a time (bench/documents.py), while a large one
# on two cores takes seconds for 16.
BATCH = 16
MIN_BATCH = 4
MAX_BATCH = 256
JOB_S = 0.5


class Embedder(Protocol):
    """An embedding model as the indexer uses it."""

    model: str | None  # the library name its jobs name (None: whatever the host has loaded)
    context_tokens: int  # the longest input it reads

    def embed(self, texts: list[str]) -> np.ndarray: ...


class Cancelled(Exception):
    pass


@dataclass(frozen=True)
class _Read:
    """A file as the reading thread left it: stat and hash (None: it could not be opened), and its document
    and passages, or why not."""

    stat: os.stat_result | None = None
    digest: str | None = None
    doc: ParsedDocument | None = None
    passages: list[Passage] = dataclasses.field(default_factory=list)
    error: Exception | None = None
    unchanged: bool = False


@dataclass(frozen=True)
class Progress:
    """Where an indexing run is; sent after each batch and each file (on the indexing thread)."""

    files_done: int
    files_total: int
    passages: int  # embedded in this run
    file: Path | None  # the file being read, None at the end
    seconds_left: float | None  # from the bytes read so far and their pace; None until there is a pace


@dataclass(frozen=True)
class RunResult:
    indexed: int
    unchanged: int
    skipped: int
    failed: int
    passages: int
    seconds: float


Parse = Callable[[Path], ParsedDocument]

# Formats read by pypdf, XML and zip readers, or html.parser: read in a child process with a time and memory
# limit (T53). Plain text, Markdown, code and CSV are read here: their readers are linear and bounded, and a
# child's start (~0.1 s) would be most of the time a folder of notes takes.
IN_CHILD = frozenset({".pdf", ".docx", ".docm", ".pptx", ".pptm", ".xlsx", ".xlsm", ".epub", ".html", ".htm", ".xhtml"})


def parse_document(path: Path, reader: ChildReader | None = None) -> ParsedDocument:
    """A document's text: the risky formats in a child process (`reader`'s, else one for this file)."""
    if path.suffix.lower() in IN_CHILD:
        return reader.parse(path) if reader is not None else parse_in_child(path)
    return parse_file(path)


def walk(source: Path) -> Iterator[Path]:
    """The documents under `source` (a file or a folder): supported suffixes only, hidden files and folders
    left out, links followed only to files inside `source`."""
    if source.is_file():
        if source.suffix.lower() in SUPPORTED_SUFFIXES:
            yield source
        return
    root = source.resolve()
    stack = [source]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            logger.info("cannot list %s: %s", folder, exc)
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_symlink():
                    target = Path(entry.path).resolve()
                    if target.is_file() and target.is_relative_to(root) and target.suffix.lower() in SUPPORTED_SUFFIXES:
                        yield Path(entry.path)
                elif entry.is_file(follow_symlinks=False) and Path(entry.name).suffix.lower() in SUPPORTED_SUFFIXES:
                    yield Path(entry.path)
            except OSError:
                continue


def lower_priority() -> None:
    """The calling thread at the reader's niceness (Linux sets it per thread; elsewhere nothing changes):
    hashing and reading files runs in the gaps of the engine's threads, not in their place."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), READER_NICE)


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Indexer:
    def __init__(
        self,
        store: DocumentStore,
        embedder: Embedder,
        *,
        parse: Parse | None = None,
        progress: Callable[[Progress], None] | None = None,
        cancel: threading.Event | None = None,
        yield_to: Callable[[], bool] | None = None,
    ) -> None:
        """`parse` reads a file (None: `parse_document`, with one child process for the whole run);
        `progress` is called on the indexing thread. While `yield_to()` is true (a chat turn is
        generating) the run holds before its next batch, as when paused."""
        self.store = store
        self.embedder = embedder
        self.parse = parse
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.yield_to = yield_to
        self._embedded = 0  # passages embedded in the current run
        self._batch = BATCH  # passages in the next job (sized by _embed to take about JOB_S)
        # Short files read and cut, waiting to be embedded together in one job (row, passages, note, stat).
        self._small: list[tuple[FileRow, list[Passage], str, os.stat_result]] = []
        self._going = threading.Event()  # clear while paused
        self._going.set()

    def pause(self) -> None:
        """Hold the run after the batch in flight (any thread)."""
        self._going.clear()

    def resume(self) -> None:
        self._going.set()

    @property
    def paused(self) -> bool:
        return not self._going.is_set()

    def add(self, collection: Collection, paths: list[Path]) -> int:
        """Add files or folders (folders are watched: `sync` picks up what changes in them); the number of
        documents found. Nothing is read yet."""
        for path in paths:
            path = Path(os.path.abspath(path))
            if not path.exists():
                raise FileNotFoundError(f"{path} does not exist")
            self.store.add_source(collection.id, path)
        return self.sync(collection)

    def sync(self, collection: Collection) -> int:
        """Look at the collection's sources again: new and changed files wait to be read, the passages of
        deleted ones go. A source that is gone (an unplugged drive) keeps what it had. Returns the files
        found."""
        seen: set[Path] = set()
        lost_roots: list[Path] = []
        found: list[tuple[Path, int, float]] = []
        excluded = self.store.excluded(collection.id)
        for source in self.store.sources(collection.id):
            if not source.exists():
                lost_roots.append(source)
                logger.info("%s is not there; its documents are kept until it is removed", source)
                continue
            for path in walk(source):
                if path in excluded or path in seen:  # excluded, or under two sources
                    continue
                try:
                    st = path.stat()
                except OSError:
                    continue
                seen.add(path)
                found.append((path, st.st_size, st.st_mtime))
        self.store.mark_found_many(collection.id, found)
        gone = [
            f.path
            for f in self.store.files(collection.id)
            if f.path not in seen and not any(f.path == r or r in f.path.parents for r in lost_roots)
        ]
        if gone:
            self.store.remove_files(collection.id, gone)
        return len(seen)

    def run(self, collection: Collection) -> RunResult:
        """Read and embed every file that waits (new, changed, or stopped half-way). Raises Cancelled.

        Files are hashed, read and cut on a thread of their own ("hearth-documents-read"), READ_AHEAD files
        ahead of the one being embedded: a PDF's child process or a folder's disk reads run while the engine
        embeds, so indexing takes about as long as embedding alone. The store is written on this thread only."""
        t0 = time.monotonic()
        todo = [f for f in self.store.files(collection.id) if f.state in (PENDING, INDEXING)]
        total_bytes = sum(f.size for f in todo) or 1
        done_bytes = 0
        counts = {INDEXED: 0, "unchanged": 0, SKIPPED: 0, FAILED: 0}
        self._embedded = 0
        self._small = []
        self._batch = BATCH
        chars = passage_chars(self.embedder.context_tokens)
        reader = ThreadPoolExecutor(1, thread_name_prefix="hearth-documents-read", initializer=lower_priority)
        child = ChildReader() if self.parse is None else None
        ahead: collections.deque[Future[_Read]] = collections.deque()
        try:
            for i, row in enumerate(todo):
                while len(ahead) <= READ_AHEAD and i + len(ahead) < len(todo):
                    ahead.append(reader.submit(self._read, todo[i + len(ahead)], chars, child))
                self._check()
                left = None
                if done_bytes > 0:
                    left = (time.monotonic() - t0) / done_bytes * (total_bytes - done_bytes)
                at = Progress(i, len(todo), self._embedded, row.path, left)
                self._report(at)
                outcome = self._index_file(collection, row, at, ahead.popleft().result())
                counts[outcome] += 1
                done_bytes += row.size
            self._check()
            self._embed_small(collection)
        finally:
            # A stop leaves at most the file being read; its child process ends at its own timeout.
            reader.shutdown(wait=False, cancel_futures=True)
            if child is not None:
                child.close()
        self._report(Progress(len(todo), len(todo), self._embedded, None, 0.0))
        return RunResult(
            counts[INDEXED], counts["unchanged"], counts[SKIPPED], counts[FAILED], self._embedded, time.monotonic() - t0
        )

    def _read(self, row: FileRow, chars: int, child: ChildReader | None) -> _Read:
        """The reading thread: a file's stat, hash, text and passages (nothing is written here)."""
        try:
            st = row.path.stat()
            digest = file_hash(row.path)
        except OSError as exc:
            return _Read(error=exc)
        if digest == row.sha256 and row.total is not None and row.passages == row.total:
            return _Read(st, digest, unchanged=True)  # the same content, all of it embedded
        try:
            doc = self.parse(row.path) if self.parse is not None else parse_document(row.path, child)
        except (Unsupported, ParseError) as exc:
            return _Read(st, digest, error=exc)
        return _Read(st, digest, doc, cut_passages(doc.sections, chars))

    def _index_file(self, collection: Collection, row: FileRow, at: Progress, read: _Read) -> str:
        path = row.path
        st, digest = read.stat, read.digest
        if st is None or digest is None:
            if not path.exists():
                self.store.remove_files(collection.id, [path])
                return SKIPPED
            exc = read.error
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self.store.set_state(row.id, FAILED, f"could not be read: {why}")
            return FAILED
        if read.unchanged:
            # Only its time changed.
            self.store.set_state(row.id, INDEXED, size=st.st_size, mtime=st.st_mtime)
            return "unchanged"
        if read.error is not None or read.doc is None:
            state = SKIPPED if isinstance(read.error, Unsupported) else FAILED
            self.store.set_state(row.id, state, str(read.error), sha256=digest, size=st.st_size, mtime=st.st_mtime)
            return state
        doc, passages = read.doc, read.passages
        if not passages:
            why = doc.note or "no text in it"
            self.store.set_state(
                row.id, SKIPPED, why, sha256=digest, pages=doc.pages, size=st.st_size, mtime=st.st_mtime
            )
            return SKIPPED
        kept = self.store.start_file(row.id, digest, doc.pages, len(passages))
        if kept == 0 and len(passages) < self._batch:
            # A short file waits to share one job with others: a folder of notes of a passage each would
            # otherwise cost an engine job and three commits per file. It is "indexing" until its batch is
            # stored, so a quit before then reads it again.
            if sum(len(p) for _, p, _, _ in self._small) + len(passages) > self._batch:
                self._embed_small(collection)
            self._small.append((row, passages, doc.note or "", st))
            return INDEXED
        self._embed_small(collection)
        start = kept
        while start < len(passages):
            self._check()
            batch = passages[start : start + self._batch]
            vectors = self._embed([p.for_embedding() for p in batch])
            self.store.add_passages(collection.id, row.id, batch, vectors)
            self._embedded += len(batch)
            start += len(batch)
            self._report(dataclasses.replace(at, passages=self._embedded))
        self.store.set_state(row.id, INDEXED, doc.note or "", size=st.st_size, mtime=st.st_mtime)
        return INDEXED

    def _embed_small(self, collection: Collection) -> None:
        """Embed the short files waiting in one job and store each whole."""
        if not self._small:
            return
        waiting, self._small = self._small, []
        vectors = self._embed([p.for_embedding() for _, passages, _, _ in waiting for p in passages])
        whole, at = [], 0
        for row, passages, note, st in waiting:
            whole.append(WholeFile(row.id, passages, vectors[at : at + len(passages)], note, st.st_size, st.st_mtime))
            at += len(passages)
        self.store.add_whole_files(collection.id, whole)
        self._embedded += at

    def _embed(self, texts: list[str]) -> np.ndarray:
        """One job; the next is sized from its pace to take about JOB_S."""
        t0 = time.monotonic()
        vectors = self.embedder.embed(texts)
        per_passage = (time.monotonic() - t0) / max(1, len(texts))
        if per_passage > 0:
            self._batch = max(MIN_BATCH, min(MAX_BATCH, int(JOB_S / per_passage), 2 * self._batch))
        return vectors

    def _check(self) -> None:
        while not self.cancel.is_set() and (not self._going.wait(0.1) or self._yielding()):
            pass
        if self.cancel.is_set():
            raise Cancelled

    def _yielding(self) -> bool:
        if self.yield_to is None or not self.yield_to():
            return False
        self.cancel.wait(0.05)  # a chat turn is generating: its tokens come first; look again shortly
        return True

    def _report(self, p: Progress) -> None:
        if self.progress is not None:
            self.progress(p)
