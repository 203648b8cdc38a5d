"""`hearth docs add|ls|search|rm|sync`: document collections from the command line, in the same database the
window uses. Adding reads and embeds the files here, with the collection's embedding model loaded in this
process; a search embeds the query with it too (or, with --keywords, needs no model)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.documents.embedding import JobEmbedder
    from app.core.documents.search import Hit
    from app.core.documents.store import Collection, DocumentStore

DEFAULT_COLLECTION = "Documents"


def add_docs_command(subparsers: Any) -> None:
    docs = subparsers.add_parser("docs", help="your documents: collections of files indexed for search and chat")
    sub = docs.add_subparsers(dest="docs_command", required=True)

    add = sub.add_parser("add", help="add files or folders to a collection and index them (folders are watched)")
    add.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    add.add_argument("--collection", "-c", default=DEFAULT_COLLECTION, help=f"default: {DEFAULT_COLLECTION}")
    add.add_argument("--model", help="the embedding model of a new collection (default: the library's latest used)")
    add.add_argument("--no-index", action="store_true", help="only add: index later with `hearth docs sync`")
    add.set_defaults(handler=cmd_add)

    ls = sub.add_parser("ls", help="the collections, or one collection's files with their state")
    ls.add_argument("collection", nargs="?")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_ls)

    search = sub.add_parser("search", help="the passages that best answer a query")
    search.add_argument("query")
    search.add_argument("--collection", "-c", action="append", help="search this one (repeatable; default: all)")
    search.add_argument("-n", "--limit", type=int, default=5)
    search.add_argument("--keywords", action="store_true", help="keywords only (BM25): no model is loaded")
    search.add_argument("--json", action="store_true")
    search.set_defaults(handler=cmd_search)

    rm = sub.add_parser("rm", help="delete a collection, or remove files or folders from it")
    rm.add_argument("collection")
    rm.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    rm.set_defaults(handler=cmd_rm)

    sync = sub.add_parser("sync", help="pick up files added, changed or deleted in a collection's folders, and index")
    sync.add_argument("collection", nargs="?", help="default: every collection")
    sync.set_defaults(handler=cmd_sync)


def _store(ctx: CliContext) -> DocumentStore:
    from app.core.documents.store import DocumentStore

    return DocumentStore(ctx.paths.documents_db)


def cmd_add(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.store import DocumentsError

    store = _store(ctx)
    try:
        missing = [p for p in args.paths if not p.exists()]
        if missing:
            return ctx.fail(f"{missing[0]} does not exist", 2)
        collection = store.find_collection(args.collection)
        if collection is None:
            model = _pick_model(ctx, args.model)
            collection = store.create_collection(args.collection, model)
            _err(f"new collection {collection.name!r}, embedded with {model}")
        elif args.model and args.model != collection.model:
            return ctx.fail(f"{collection.name!r} is embedded with {collection.model}; a collection keeps its model", 2)
        with _embedder(ctx, collection.model) as embedder:
            from app.core.documents.indexer import Indexer

            indexer = Indexer(store, embedder, progress=_progress_line)
            found = indexer.add(collection, list(args.paths))
            _err(f"{found} document(s) in {collection.name!r}")
            if args.no_index:
                return 0
            return _run(ctx, store, indexer, collection)
    except DocumentsError as exc:
        return ctx.fail(exc, 2)
    finally:
        store.close()


def cmd_sync(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.indexer import Indexer
    from app.core.documents.store import DocumentsError

    store = _store(ctx)
    try:
        targets = [store.collection(args.collection)] if args.collection else store.collections()
        status = 0
        for collection in targets:
            with _embedder(ctx, collection.model) as embedder:
                indexer = Indexer(store, embedder, progress=_progress_line)
                found = indexer.sync(collection)
                _err(f"{collection.name}: {found} document(s)")
                status = max(status, _run(ctx, store, indexer, collection))
        return status
    except DocumentsError as exc:
        return ctx.fail(exc, 2)
    finally:
        store.close()


def _run(ctx: CliContext, store: DocumentStore, indexer: Any, collection: Collection) -> int:
    from app.core.documents.embedding import EmbeddingFailed
    from app.core.documents.indexer import Cancelled
    from app.core.documents.store import FAILED

    try:
        result = indexer.run(collection)
    except KeyboardInterrupt:
        indexer.cancel.set()
        _err("\nstopped: `hearth docs sync` goes on where this stopped")
        return 130
    except Cancelled:
        return 130
    except EmbeddingFailed as exc:
        return ctx.fail(f"the embedding model failed: {exc}", 1, new_line=True)
    sys.stderr.write("\r\033[K")
    print(
        f"{collection.name}: {result.indexed} indexed, {result.unchanged} unchanged, {result.skipped} skipped, "
        f"{result.failed} failed; {result.passages} passages embedded in {result.seconds:.1f} s"
    )
    for f in store.files(collection.id, FAILED):
        print(f"  failed: {f.path}: {f.reason}")
    return 0


def cmd_ls(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.store import DocumentsError

    store = _store(ctx)
    try:
        if args.collection:
            c = store.collection(args.collection)
            files = store.files(c.id)
            if args.json:
                print(json.dumps([_file_json(f) for f in files], indent=2))
                return 0
            print(f"{c.name}: {c.files} files, {c.passages} passages, {_size(c.bytes)}, embedded with {c.model}")
            for source in store.sources(c.id):
                print(f"  source: {source}{'/' if source.is_dir() else ''}")
            for f in files:
                detail = f"{f.passages} passages" + (f", {f.pages} pages" if f.pages else "")
                if f.state in ("skipped", "failed"):
                    detail = f.reason
                print(f"  {f.state:<9} {f.path}  ({detail})")
            return 0
        collections = store.collections()
        if args.json:
            print(json.dumps([_collection_json(c) for c in collections], indent=2))
            return 0
        if not collections:
            print("no collections yet: `hearth docs add PATH` makes one")
        for c in collections:
            print(f"{c.name:<24} {c.files:>6} files {c.passages:>8} passages {_size(c.bytes):>9}  {c.model}")
        return 0
    except DocumentsError as exc:
        return ctx.fail(exc, 2)
    finally:
        store.close()


def cmd_search(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.store import DocumentsError

    if not 1 <= args.limit <= 100:
        return ctx.fail("--limit is 1 to 100", 2)
    try:
        hits = search(ctx, args.collection or [], args.query, args.limit, keywords_only=args.keywords)
    except DocumentsError as exc:
        return ctx.fail(exc, 2)
    if args.json:
        print(json.dumps([_hit_json(h) for h in hits], indent=2))
        return 0
    if not hits:
        print("nothing found")
    for i, h in enumerate(hits, 1):
        where = h.file.name + (f", page {h.page}" if h.page else "") + (f" › {h.heading}" if h.heading else "")
        text = " ".join(h.text.split())
        print(f"[{i}] {where}  ({h.collection})\n    {text[:300]}{'…' if len(text) > 300 else ''}")
    return 0


def search(ctx: CliContext, names: list[str], query: str, limit: int, *, keywords_only: bool = False) -> list[Hit]:
    """The `limit` best passages for `query` in the collections named (all when none). Raises
    DocumentsError (no such collection, none at all)."""
    retriever = Retriever(ctx, names)
    try:
        return retriever.search(query, limit, keywords_only=keywords_only)
    finally:
        retriever.close()


class Retriever:
    """Searches over some collections for as long as it is open (a `hearth chat --docs` session): each
    embedding model the collections use is loaded once, when first needed, in a host of its own."""

    def __init__(self, ctx: CliContext, names: list[str]) -> None:
        from app.core.documents.search import Searcher
        from app.core.documents.store import DocumentsError

        self._ctx = ctx
        self._store = _store(ctx)
        self._embedders: dict[str, JobEmbedder] = {}
        self._open = ExitStack()
        try:
            self.collections = [self._store.collection(n) for n in names] if names else self._store.collections()
            if not self.collections:
                raise DocumentsError("no collections yet: `hearth docs add PATH` makes one")
        except BaseException:
            self._store.close()
            raise
        self._searcher = Searcher(self._store)

    def search(self, query: str, limit: int, *, keywords_only: bool = False) -> list[Hit]:
        if keywords_only:
            return self._searcher.search(query, self.collections, limit=limit, mode="keyword")
        hits = []
        # Collections embedded by different models are searched each with its own, then ranked together.
        for model in dict.fromkeys(c.model for c in self.collections):
            group = [c for c in self.collections if c.model == model]
            if model not in self._embedders:
                self._embedders[model] = self._open.enter_context(_embedder(self._ctx, model))
            hits += self._searcher.search(query, group, limit=limit, embed=self._embedders[model].embed)
        return sorted(hits, key=lambda h: -h.score)[:limit]

    def close(self) -> None:
        try:
            self._open.close()
        finally:
            self._store.close()


def cmd_rm(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.store import DocumentsError

    store = _store(ctx)
    try:
        c = store.collection(args.collection)
        if not args.paths:
            store.delete_collection(c.name)
            print(f"deleted {c.name!r} ({c.files} files, {c.passages} passages)")
            return 0
        removed = 0
        for path in args.paths:
            path = Path(path).absolute()
            n = store.remove_source(c.id, path)
            if n == 0 and store.file(c.id, path) is None:
                return ctx.fail(f"{path} is not in {c.name!r} (see `hearth docs ls {c.name}`)", 2)
            removed += n
        print(f"removed {removed} file(s) from {c.name!r}")
        return 0
    except DocumentsError as exc:
        return ctx.fail(exc, 2)
    finally:
        store.close()


def _pick_model(ctx: CliContext, asked: str | None) -> str:
    """The library name of the embedding model for a new collection: the one asked for (checked), else the
    one Settings → Documents names, else the library's most recently used. Raises NoEmbeddingModel (which
    names one to pull) or DocumentsError."""
    from app.core.documents.service import check_embedding_model, pick_embedding_model
    from app.core.runtime.resolve import ModelResolver

    library = ctx.open_library()
    try:
        role = ModelResolver(library).role
        if asked:
            return check_embedding_model(library, role, asked)
        return pick_embedding_model(library, role, ctx.settings.documents.embedding_model)
    finally:
        library.close()


@contextmanager
def _embedder(ctx: CliContext, model_name: str) -> Iterator[JobEmbedder]:
    """The collection's model loaded on an engine host of this process, as an Embedder."""
    from app.core.documents.embedding import JobEmbedder
    from app.core.documents.store import DocumentsError
    from app.core.engines import default_registry
    from app.core.runtime.engine_host import EngineHost
    from app.core.runtime.resolve import ModelResolver

    library = ctx.open_library()
    host = None
    try:
        resolver = ModelResolver(library)
        model = library.find(model_name)
        if model is None or not model.ready:
            raise DocumentsError(
                f"the collection's embedding model {model_name!r} is not in the library; pull it again"
            )
        host = EngineHost(default_registry(), calibration=ctx.calibration, resolver=resolver, name="hearth-docs")
        cancel = threading.Event()
        embedder = JobEmbedder(host.submit, model.name, resolver.context_length(model), cancel)
        try:
            yield embedder
        finally:
            cancel.set()
    finally:
        if host is not None:
            host.shutdown(10)
        library.close()


def _progress_line(p: Any) -> None:
    """Called on the indexing thread (the main one here)."""
    if p.file is None:
        return
    left = f", about {_duration(p.seconds_left)} left" if p.seconds_left else ""
    name = p.file.name if len(p.file.name) <= 40 else p.file.name[:39] + "…"
    sys.stderr.write(f"\r\033[K{p.files_done + 1}/{p.files_total} {name}: {p.passages} passages{left}")
    sys.stderr.flush()


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _collection_json(c: Collection) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(c).items() if k not in ("id", "created")}


def _file_json(f: Any) -> dict[str, Any]:
    fields = dataclasses.asdict(f)
    return {k: fields[k] for k in ("state", "reason", "pages", "passages", "size")} | {"path": str(f.path)}


def _hit_json(h: Any) -> dict[str, Any]:
    return {
        "collection": h.collection,
        "file": str(h.file),
        "page": h.page,
        "heading": h.heading,
        "text": h.text,
        "score": h.score,
        "keyword_rank": h.keyword_rank,
        "vector_rank": h.vector_rank,
    }
