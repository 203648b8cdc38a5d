"""The passages a chat turn is given from the user's documents: the collections the conversation has on
(hybrid search, reranked when a reranker is loaded) and the files attached to the message, fitted into a share
of the context the planner left free, put before the question (grounding.py) and saved with the reply.

It runs on the turn's worker thread (ChatTurn's `prepare`), after the turn is planned and its rows committed
and before the model starts: a search embeds the question with the collection's model (a job on the pool), which
must never hold the window's thread.

An attached file goes in whole when it is short (at most a quarter of the context and within its share);
a longer one is cut into passages (documents.passages) and its best passages for the question are picked by
BM25 in an in-memory SQLite FTS5 table. FTS5 rather than a BM25 of our own: the same tokenizer, query builder
(stop words dropped, every word quoted, so the question is never FTS syntax) and ranking as a collection's
keyword search, so an attached file is searched as it would be once added to a collection; a few thousand
passages index in milliseconds, and nothing is written to disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.core.chat.context import ContextPlan
from app.core.chat.grounding import CHARS_PER_TOKEN, Source, grounded_question, sources_within
from app.core.chat.operations import ChatOperations
from app.core.documents.embedding import EmbeddingFailed
from app.core.documents.indexer import parse_document
from app.core.documents.parsing import SUPPORTED_SUFFIXES, ParseError, Section
from app.core.documents.passages import cut_passages
from app.core.documents.search import Hit, fts_query
from app.core.documents.store import Collection, DocumentsError
from app.core.engines.base import GenerateRequest
from app.core.errors import HearthError
from app.core.events import Event

logger = logging.getLogger(__name__)

# Documents get at most this share of the tokens the plan leaves free (a third; half when a file is attached:
# the user asked about that file), so the reply and the next turns keep room.
COLLECTIONS_SHARE = 1 / 3
ATTACHED_SHARE = 1 / 2
WHOLE_FRACTION = 1 / 4  # an attached file this share of the context or less goes in whole
OVERHEAD_TOKENS = 100  # the instruction and the "Question:" label around the passages
SEARCH_LIMIT = 8  # passages asked of the collections; the budget keeps fewer when they are long
MAX_ATTACHED_DOCUMENTS = 4  # one message's files
WRITE_TIMEOUT_S = 30.0


class DocumentSearch(Protocol):
    """What the chat needs of the documents (app.core.documents.service.Documents)."""

    renamed: Event[tuple[str, str]]  # a collection's (old, new) name: conversations that search it follow

    def collections(self) -> list[Collection]: ...

    def search(
        self, query: str, names: Sequence[str] = (), *, limit: int = 5, rerank: bool = True, mode: str = "hybrid"
    ) -> list[Hit]: ...


class DocumentRejected(HearthError):
    """A file attached to a message could not be read; str() says why, for the user."""


@dataclass(frozen=True)
class AttachedDocument:
    """A file attached to one message, read: its sections (with pages and headings), not yet cut."""

    name: str
    path: Path
    sections: tuple[Section, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections if s.text.strip())

    @property
    def chars(self) -> int:
        return sum(len(s.text) for s in self.sections)


def read_document(path: Path) -> AttachedDocument:
    """Any thread but the window's: the file at `path` read as the documents read it: PDF, office files, EPUB
    and HTML in a child process under a memory and time limit (T53), text in this one, every reader bounded.
    Raises DocumentRejected with the reason."""
    path = Path(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise DocumentRejected(
            f"{path.name}: {path.suffix or 'a file without a suffix'} is not a document Hearth reads"
        )
    try:
        parsed = parse_document(path)
    except ParseError as exc:
        raise DocumentRejected(f"{path.name}: {exc}") from exc
    sections = tuple(s for s in parsed.sections if s.text.strip())
    if not sections:
        raise DocumentRejected(f"{path.name}: {parsed.note or 'no text in it'}")
    return AttachedDocument(path.name, path, sections)


@dataclass(frozen=True)
class TurnDocuments:
    """What one turn reads: the conversation's collections and the files attached to its message."""

    collections: tuple[str, ...] = ()
    attached: tuple[AttachedDocument, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.collections or self.attached)


def documents_budget(plan: ContextPlan, attached: bool) -> int:
    """The tokens the passages may take: a share of what the plan leaves free after the prompt and the reply's
    reserve, less the instruction around them; 0 when there is no room."""
    free = plan.budget - plan.prompt_tokens
    share = int(free * (ATTACHED_SHARE if attached else COLLECTIONS_SHARE)) - OVERHEAD_TOKENS
    return max(0, share)


def best_passages(question: str, texts: Sequence[str], headings: Sequence[str] = ()) -> list[int]:
    """The indexes of `texts` best first for `question` by BM25 (the ones no word matches follow in their
    order), searched in an in-memory FTS5 table made the way a collection's is."""
    order = list(range(len(texts)))
    match = fts_query(question)
    if match is None or not texts:
        return order
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE p USING fts5(text, heading, tokenize='unicode61 remove_diacritics 2')")
        conn.executemany(
            "INSERT INTO p(rowid, text, heading) VALUES (?, ?, ?)",
            [(i, t, headings[i] if i < len(headings) else "") for i, t in enumerate(texts)],
        )
        ranked = [int(r[0]) for r in conn.execute("SELECT rowid FROM p WHERE p MATCH ? ORDER BY bm25(p)", (match,))]
    except sqlite3.OperationalError:  # an SQLite without FTS5: the file's own order
        logger.info("no FTS5 in this SQLite: an attached file's passages are taken in order")
        return order
    finally:
        conn.close()
    seen = set(ranked)
    return ranked + [i for i in order if i not in seen]


def attached_sources(question: str, files: Sequence[AttachedDocument], budget_tokens: int, n_ctx: int) -> list[Source]:
    """The attached files' text within `budget_tokens` (shared between them): a short file whole, a long one's
    best passages for `question`. Numbered from 1."""
    out: list[Source] = []
    if not files or budget_tokens <= 0:
        return out
    each = budget_tokens // len(files)
    for doc in files:
        text = doc.text
        if len(text) // CHARS_PER_TOKEN + 1 <= min(int(n_ctx * WHOLE_FRACTION), each):
            out.append(Source(0, "", doc.path, None, "", text))
            continue
        passages = cut_passages(doc.sections)
        ranked = best_passages(question, [p.text for p in passages], [p.heading for p in passages])
        hits = [
            Hit(
                i,
                "",
                doc.path,
                passages[i].ordinal,
                passages[i].page,
                passages[i].heading,
                passages[i].text,
                0.0,
                None,
                None,
            )
            for i in ranked
        ]
        out += sources_within(hits, each)
    return numbered(out)


def numbered(sources: Sequence[Source]) -> list[Source]:
    """`sources` numbered 1, 2, … in their order."""
    return [Source(i, s.collection, s.file, s.page, s.heading, s.text) for i, s in enumerate(sources, start=1)]


def collection_sources(question: str, search: DocumentSearch, names: Sequence[str], budget_tokens: int) -> list[Source]:
    """The collections' best passages for `question` within `budget_tokens`: hybrid search (reranked when a
    reranker is loaded), or keywords alone when the embedding model cannot run. Collections deleted since the
    conversation turned them on are skipped. Numbered from 1."""
    existing = {c.name.lower() for c in search.collections()}  # collection names compare without case
    names = [n for n in names if n.lower() in existing]
    if not names or budget_tokens <= 0 or not question.strip():
        return []
    try:
        hits = search.search(question, names, limit=SEARCH_LIMIT)
    except (
        DocumentsError,
        EmbeddingFailed,
        HearthError,
    ) as exc:  # the embedding model is gone or failed: keywords still find
        logger.warning("document search failed (%s); searching by keywords only", exc)
        hits = search.search(question, names, limit=SEARCH_LIMIT, rerank=False, mode="keyword")
    return sources_within(hits, budget_tokens)


class Grounding:
    """Makes a turn's request answer from documents. `search` None: no documents here (attached files still
    work). Any thread; `prepare` runs on the turn's worker."""

    def __init__(self, search: DocumentSearch | None, chats: ChatOperations) -> None:
        self.search, self.chats = search, chats

    def sources(self, question: str, documents: TurnDocuments, plan: ContextPlan) -> list[Source]:
        """The passages for this turn, the attached files' first, within the plan's documents budget."""
        budget = documents_budget(plan, bool(documents.attached))
        given = attached_sources(question, documents.attached, budget, plan.n_ctx)
        budget -= sum(len(s.text) + 40 for s in given) // CHARS_PER_TOKEN
        if self.search is not None and documents.collections:
            given += collection_sources(question, self.search, documents.collections, budget)
        return numbered(given)

    def prepare(
        self,
        request: GenerateRequest,
        documents: TurnDocuments,
        plan: ContextPlan,
        reply_id: int | None,
        cancel: threading.Event | None = None,
    ) -> GenerateRequest:
        """Worker thread: `request` with its last user message grounded in the passages found, which are saved
        with reply `reply_id` first (committed before the model reads them). Unchanged when none are found."""
        messages = list(request.messages or ())
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        if last is None or not documents:
            return request
        question = messages[last].content
        given = self.sources(question, documents, plan)
        if not given or (cancel is not None and cancel.is_set()):
            return request
        if reply_id is not None:
            self.chats.set_sources(reply_id, given).result(WRITE_TIMEOUT_S)
        messages[last] = messages[last].model_copy(update={"content": grounded_question(question, given)})
        return request.model_copy(update={"messages": messages})
