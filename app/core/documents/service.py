"""The documents of a running Hearth: one store, one indexing thread, searches from any thread.

The window's Documents page, the chat's Documents menu and the API's vector stores all go through one
`Documents`: a collection made in one is there in the others. Indexing runs on the thread "hearth-documents"
(one collection at a time, in batches); it holds while a chat turn generates, so a reply never waits behind
a document's embedding. Watched folders are looked at on start and every WATCH_S seconds: a new, changed or
deleted file is found by its size and time and read again only if its hash changed (indexer.py).

Embedding and reranking are jobs on the model pool (embedding.py): the collection's model is loaded on demand
like any model an API request names, and unloaded like them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from app.core.documents.embedding import EmbeddingFailed, JobEmbedder, Submit, models_for
from app.core.documents.indexer import Cancelled, Indexer, Parse, Progress, RunResult
from app.core.documents.search import Hit, Searcher
from app.core.documents.store import FAILED, Collection, DocumentsError, DocumentStore, FileRow
from app.core.events import Event
from app.core.library.store import Library, LocalModel
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.core.settings import DocumentsSettings

logger = logging.getLogger(__name__)

# How often watched folders are looked at while Hearth runs: a walk of stat calls, cheap for thousands of
# files; a file saved now shows in search within this plus its embedding time.
WATCH_S = 30.0
# The watched folders are looked at again after at least this many times what the last look took.
WATCH_COST = 20
# What to download when there is no embedding model (the CLI and the API name it; the window recommends
# by hardware: recommend.py).
SUGGESTED_EMBEDDER = "nomic-ai/nomic-embed-text-v1.5-GGUF"


class NoEmbeddingModel(DocumentsError):
    """No embedding model is ready in the library; str() names one to download."""


@dataclass(frozen=True)
class IndexStatus:
    """What the indexing thread is doing (the `status` event carries it; views show it)."""

    collection: str | None = None  # indexed now; None: idle
    progress: Progress | None = None
    paused: bool = False
    waiting_for_chat: bool = False  # held while a chat turn generates
    queued: tuple[str, ...] = ()  # collections waiting their turn
    last: RunResult | None = None  # the last run's outcome
    error: str | None = None  # why the last run stopped early (its model failed), if it did

    @property
    def busy(self) -> bool:
        return self.collection is not None or bool(self.queued)


def check_embedding_model(library: Library, role_of: Callable[[LocalModel], str], name: str) -> str:
    """The library name of the ready embedding model `name` means; DocumentsError if there is none."""
    model = library.find(name)
    if model is None or not model.ready:
        raise DocumentsError(f"no model {name!r} ready in the library")
    role = role_of(model)
    if role != "embedding":
        raise DocumentsError(f"{model.name} is a {role} model, not an embedding model")
    return model.name


def pick_embedding_model(library: Library, role_of: Callable[[LocalModel], str], chosen: str = "") -> str:
    """The embedding model a new collection uses: `chosen` (Settings → Documents) when it is ready, else the
    library's most recently used embedding model. Raises NoEmbeddingModel."""
    if chosen:
        try:
            return check_embedding_model(library, role_of, chosen)
        except DocumentsError:
            logger.info("the embedding model in Settings (%s) is not ready; using the library's", chosen)
    found = models_for(library, role_of)
    if not found:
        raise NoEmbeddingModel(
            f"no embedding model in the library: download one (e.g. `hearth pull {SUGGESTED_EMBEDDER}`) "
            "to index documents"
        )
    return found[0].name


class Documents:
    def __init__(
        self,
        db_path: Path,
        submit: Submit,
        library: Library,
        *,
        role_of: Callable[[LocalModel], str],
        context_of: Callable[[LocalModel], int],
        settings: Callable[[], DocumentsSettings] = DocumentsSettings,
        generating: Callable[[], bool] = lambda: False,
        loaded_models: Callable[[], list[str]] = list,
        parse: Parse | None = None,
        watch_s: float = WATCH_S,
    ) -> None:
        """`submit` puts an embedding or rerank job on the pool; `role_of`/`context_of` read a library
        model's role and context (ModelResolver); `generating()` is true while a chat turn generates (any
        thread); `loaded_models()` names the models resident now (a reranker among them is used)."""
        self.store = DocumentStore(db_path)
        self.searcher = Searcher(self.store)
        self.library = library
        self._submit = submit
        self._role_of = role_of
        self._context_of = context_of
        self._settings = settings
        self._generating = generating
        self._loaded_models = loaded_models
        self._parse = parse
        self.watch_s = watch_s
        # Any thread: collections or their files changed (added, removed, a file's state).
        self.changed: Event[None] = Event("documents.changed")
        # The indexing thread (or the caller of pause/resume): where indexing is.
        self.status_changed: Event[IndexStatus] = Event("documents.status")
        # The thread that renamed it: (old name, new name) of a collection (chats that search it follow).
        self.renamed: Event[tuple[str, str]] = Event("documents.renamed")
        self._cond = threading.Condition()
        self._queue: list[int] = []  # collection ids waiting to be synced and indexed, in order
        self._status = IndexStatus()
        self._running: Indexer | None = None
        self._running_id: int | None = None
        self._paused = False
        self._stop = threading.Event()
        self._cancel_run = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_watch = 0.0
        self._sync_s: dict[int, float] = {}  # how long each collection's last look at its folders took

    @classmethod
    def on_pool(
        cls, db_path: Path, pool: ModelPool, resolver: ModelResolver, settings: Callable[[], DocumentsSettings]
    ) -> Documents:
        """The documents of a running Hearth (the app's services, `hearth serve`): embedding and reranking on
        `pool`, indexing holding while any of its models generates, a loaded reranker used by searches."""
        return cls(
            db_path,
            pool.submit,
            resolver.library,
            role_of=resolver.role,
            context_of=resolver.context_length,
            settings=settings,
            generating=lambda: any(r.state.status == "generating" for r in pool.residents()),
            loaded_models=lambda: [str(r.state.model.path) for r in pool.residents() if r.state.model is not None],
        )

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the indexing thread: every collection is synced first (what changed while Hearth was
        closed, and files a quit stopped half-way, resume)."""
        if self._thread is not None:
            return
        for c in self.store.collections():
            self._enqueue(c.id)
        self._next_watch = time.monotonic() + self.watch_s
        self._thread = threading.Thread(target=self._loop, name="hearth-documents", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop indexing (the batch in flight is stored or dropped whole) and close the store."""
        self._stop.set()
        self._cancel_run.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self.store.close()

    # -- collections ----------------------------------------------------------------------------------------

    def collections(self) -> list[Collection]:
        return self.store.collections()

    def collection(self, name: str) -> Collection:
        return self.store.collection(name)

    def create(self, name: str, model: str | None = None) -> Collection:
        """A new collection embedded with `model` (checked), else the model pick_model() gives. Raises
        DocumentsError, NoEmbeddingModel."""
        model_name = self.check_model(model) if model else self.pick_model()
        collection = self.store.create_collection(name, model_name)
        self.changed.emit(None)
        return collection

    def rename(self, name: str, new_name: str) -> Collection:
        old = self.store.collection(name).name
        collection = self.store.rename_collection(name, new_name)
        self.renamed.emit((old, collection.name))
        self.changed.emit(None)
        return collection

    def delete(self, name: str) -> None:
        collection = self.store.collection(name)
        self._drop(collection.id)
        self.store.delete_collection(name)
        self.changed.emit(None)

    def set_model(self, name: str, model: str) -> Collection:
        """Embed the collection with another model: every file is read again."""
        collection = self.store.collection(name)
        model_name = self.check_model(model)
        if model_name != collection.model:
            self._drop(collection.id)
            self.store.set_model(collection.id, model_name)
            self._enqueue(collection.id)
            self.changed.emit(None)
        return self.store.collection(name)

    def files(self, name: str) -> list[FileRow]:
        return self.store.files(self.store.collection(name).id)

    def add(self, name: str, paths: Sequence[Path]) -> Collection:
        """Add files or folders (folders are watched) and index them in the background. Raises
        DocumentsError for a path that is not there."""
        collection = self.store.collection(name)
        for path in paths:
            path = Path(path).expanduser().absolute()
            if not path.exists():
                raise DocumentsError(f"{path} does not exist")
            self.store.add_source(collection.id, path)
        self._enqueue(collection.id)
        self.changed.emit(None)
        return collection

    def remove(self, name: str, paths: Sequence[Path]) -> int:
        """Forget files or folders and their passages; the number of files removed. A file inside a watched
        folder is excluded from it, so the next look at the folder does not bring it back (adding it again
        does)."""
        collection = self.store.collection(name)
        sources = self.store.sources(collection.id)
        removed = 0
        for path in paths:
            path = Path(path).expanduser().absolute()
            if path in sources:
                removed += self.store.remove_source(collection.id, path)
            elif self.store.file(collection.id, path) is not None:
                self.store.exclude(collection.id, path)
                removed += 1
        self.changed.emit(None)
        return removed

    def sync(self, name: str | None = None) -> None:
        """Look at a collection's folders again (every collection's: None) and index what changed."""
        for c in [self.store.collection(name)] if name else self.store.collections():
            self._enqueue(c.id)

    def retry_failed(self, name: str) -> int:
        """Read the collection's failed files again (a file fixed, or a limit raised); how many."""
        collection = self.store.collection(name)
        failed = self.store.files(collection.id, FAILED)
        for f in failed:
            self.store.set_state(f.id, "pending")
        self._enqueue(collection.id)
        return len(failed)

    # -- models ---------------------------------------------------------------------------------------------

    def pick_model(self) -> str:
        """The embedding model a new collection uses (pick_embedding_model). Raises NoEmbeddingModel."""
        return pick_embedding_model(self.library, self._role_of, self._settings().embedding_model)

    def check_model(self, name: str) -> str:
        """The library name of the ready embedding model `name` means; DocumentsError if there is none."""
        return check_embedding_model(self.library, self._role_of, name)

    def embedder(self, model_name: str, cancel: threading.Event | None = None) -> JobEmbedder:
        """The collection's model as an Embedder on the pool. Raises DocumentsError if it left the library."""
        model = self.library.find(model_name)
        if model is None or not model.ready:
            raise DocumentsError(f"the embedding model {model_name!r} is not in the library any more; download it")
        return JobEmbedder(self._submit, model.name, self._context_of(model), cancel)

    def reranker(self) -> JobEmbedder | None:
        """The reranker searches use: Settings' choice, else one already loaded; None without one."""
        chosen = self._settings().reranker
        names = [chosen] if chosen else self._loaded_models()
        for name in names:
            model = self.library.find(name)
            if model is not None and model.ready and self._role_of(model) == "rerank":
                return JobEmbedder(self._submit, model.name, self._context_of(model))
        return None

    # -- search ---------------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        names: Sequence[str] = (),
        *,
        limit: int = 5,
        rerank: bool = True,
        mode: str = "hybrid",
    ) -> list[Hit]:
        """The `limit` best passages in the named collections (all: none named). Any thread; embeds the
        query with each collection's model. Raises DocumentsError (no such collection), EmbeddingFailed."""
        collections = [self.store.collection(n) for n in names] if names else self.store.collections()
        return self.search_collections(query, collections, limit=limit, rerank=rerank, mode=mode)

    def search_collections(
        self,
        query: str,
        collections: Sequence[Collection],
        *,
        limit: int = 5,
        rerank: bool = True,
        mode: str = "hybrid",
    ) -> list[Hit]:
        reranker = self.reranker() if rerank and mode == "hybrid" else None
        hits: list[Hit] = []
        # Collections embedded by different models are searched each with its own, then ranked together.
        for model in dict.fromkeys(c.model for c in collections):
            group = [c for c in collections if c.model == model]
            embed = None
            if mode != "keyword" and any(c.passages for c in group):
                embed = self.embedder(model).embed
            hits += self.searcher.search(
                query, group, limit=limit, embed=embed, mode=mode, rerank=reranker.rerank if reranker else None
            )
        return sorted(hits, key=lambda h: -h.score)[:limit]

    # -- indexing -------------------------------------------------------------------------------------------

    @property
    def status(self) -> IndexStatus:
        with self._cond:
            return self._status

    def pause(self) -> None:
        """Any thread: hold indexing after the batch in flight (kept across collections until resume)."""
        with self._cond:
            self._paused = True
            if self._running is not None:
                self._running.pause()
        self._set_status()  # paused comes from self._paused

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            if self._running is not None:
                self._running.resume()
            self._cond.notify_all()
        self._set_status()

    def wait_idle(self, timeout: float) -> bool:
        """Any thread: wait until nothing is queued or indexing (tests, the API's file batches)."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._running_id is not None or self._status.collection is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def _enqueue(self, collection: int) -> None:
        with self._cond:
            if collection not in self._queue:
                self._queue.append(collection)
            self._cond.notify_all()
        self._set_status()

    def _drop(self, collection: int) -> None:
        """Take a collection off the queue and stop its run (it is being deleted or re-embedded): after
        this, no batch of its old run is stored."""
        end = time.monotonic() + 15.0
        with self._cond:
            if collection in self._queue:
                self._queue.remove(collection)
            if self._running_id == collection:
                self._cancel_run.set()
            while self._running_id == collection and time.monotonic() < end:
                self._cond.wait(0.2)

    def watch_interval(self) -> float:
        """Seconds until the next look at the watched folders: WATCH_S, or WATCH_COST times what the last
        looks took, so a folder of 100,000 files (7 s of stat calls) costs a few per cent of a core."""
        return max(self.watch_s, WATCH_COST * sum(self._sync_s.values()))

    def _loop(self) -> None:
        """The indexing thread. Not at the reader's lower priority: a model its first job loads gets its engine
        thread from here, and a thread inherits its maker's niceness."""
        while not self._stop.is_set():
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    wait = self._next_watch - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._stop.is_set():
                    return
                if not self._queue:  # time to look at watched folders
                    self._next_watch = time.monotonic() + self.watch_interval()
                    if self._settings().watch_folders:
                        ids = list(self.store.collection_names())
                        self._queue.extend(i for i in ids if i not in self._queue)
                    continue
                cid = self._queue.pop(0)
                self._running_id = cid
            try:
                self._index(cid)
            except Exception:  # a bug in one run must not end the thread that indexes every collection
                logger.exception("indexing collection %s failed", cid)
            finally:
                with self._cond:
                    self._running_id = None
                    self._running = None
                    self._cond.notify_all()
                self._set_status(collection=None, progress=None, waiting_for_chat=False)

    def _index(self, cid: int) -> None:
        collection = self.store.collection_by_id(cid)
        if collection is None:
            return
        self._cancel_run.clear()
        try:
            embedder = self.embedder(collection.model, self._cancel_run)
        except DocumentsError as exc:
            self._set_status(error=f"{collection.name}: {exc}")
            return
        indexer = Indexer(
            self.store,
            embedder,
            parse=self._parse,
            progress=lambda p: self._on_progress(collection.name, p),
            cancel=self._cancel_run,
            yield_to=self._chat_first,
        )
        with self._cond:
            self._running = indexer
            if self._paused:
                indexer.pause()
        self._set_status(collection=collection.name, progress=None, error=None)
        before = {(f.path, f.state) for f in self.store.files(cid)}
        t0 = time.monotonic()
        indexer.sync(collection)
        self._sync_s[cid] = time.monotonic() - t0
        if {(f.path, f.state) for f in self.store.files(cid)} != before:
            self.changed.emit(None)
        try:
            result = indexer.run(collection)
        except Cancelled:
            return
        except (EmbeddingFailed, DocumentsError) as exc:
            # The model could not be loaded or failed: the file in flight stays "indexing" and resumes later.
            logger.warning("indexing %s stopped: %s", collection.name, exc)
            self._set_status(error=f"{collection.name}: {exc}")
            self.changed.emit(None)
            return
        self._set_status(last=result)
        self.changed.emit(None)

    def _chat_first(self) -> bool:
        held = self._generating()
        if held != self.status.waiting_for_chat:
            self._set_status(waiting_for_chat=held)
        return held

    def _on_progress(self, name: str, p: Progress) -> None:
        """The indexing thread: after each batch and each file."""
        previous = self.status.progress
        self._set_status(progress=p)
        if previous is None or previous.files_done != p.files_done:
            self.changed.emit(None)  # a file's state changed

    def _set_status(self, **changes: object) -> None:
        with self._cond:
            names = self.store.collection_names() if self._queue else {}
            queued = tuple(names[i] for i in self._queue if i in names)
            self._status = replace(self._status, queued=queued, paused=self._paused, **changes)  # type: ignore[arg-type]
            status = self._status
            self._cond.notify_all()
        self.status_changed.emit(status)
