"""Hybrid search over collections: BM25 (FTS5) and vectors, fused by rank, then reranked when a reranker is
at hand.

Keywords find what vectors blur (a name, an error code, a version number) and vectors find what keywords miss
(the same idea in other words); reciprocal rank fusion joins the two lists by rank alone, so neither score's
scale has to be known. A reranker reads the query with each fused candidate and orders them best.

The vectors are scanned exactly, as one matrix per collection read once and kept until the collection
changes. sqlite-vec was the other choice; its vec0 tables scan the same way, and it needs SQLite extensions
loaded, which the Python of many installs (python.org's macOS builds, this project's CI) is built without.
A matrix of 100,000 passages of 384 float32 numbers is 147 MiB and one product over it takes milliseconds.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.documents.store import Collection, DocumentStore

# The k of reciprocal rank fusion (Cormack et al. use 60): how much the top ranks count over the rest.
RRF_K = 60
# Candidates each way before fusion, and how many fused ones a reranker reads.
CANDIDATES = 50
RERANK_CANDIDATES = 20
_WORD = re.compile(r"\w+", re.UNICODE)
# Words a question is made of that say nothing about what is asked; BM25 weighs them low already, but an OR
# of them matches nearly every passage.
_STOP = frozenset(
    "a an and are as at be by for from how i in is it of on or that the this to was what when where which who why "
    "with do does did can you your my me we our".split()
)

Embed = Callable[[list[str]], np.ndarray]
Rerank = Callable[[str, list[str]], list[float]]


@dataclass(frozen=True)
class Hit:
    passage: int
    collection: str
    file: Path
    ordinal: int
    page: int | None
    heading: str
    text: str
    score: float  # the reranker's when it ran, else the fused score (higher is better)
    keyword_rank: int | None  # where BM25 placed it (1 = first), None if it did not
    vector_rank: int | None


class Searcher:
    """Search over one store; thread-safe (the matrices are swapped whole under a lock)."""

    def __init__(self, store: DocumentStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._matrices: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}  # collection -> (version, ids, vectors)

    def search(
        self,
        query: str,
        collections: Sequence[Collection],
        *,
        limit: int = 5,
        embed: Embed | None = None,
        rerank: Rerank | None = None,
        mode: str = "hybrid",
    ) -> list[Hit]:
        """The `limit` best passages for `query`. `embed(texts)` gives the query's vector with the
        collections' model (None: keywords only); `rerank(query, texts)` scores candidates. `mode`: "hybrid",
        "keyword" or "vector" (the bench compares them)."""
        if not query.strip() or not collections:
            return []
        names = {c.id: c.name for c in collections}
        keyword = self.keyword_ranks(query, list(names)) if mode in ("hybrid", "keyword") else []
        vector: list[int] = []
        if mode in ("hybrid", "vector") and embed is not None:
            qv = np.asarray(embed([query]), dtype=np.float32).reshape(-1)
            vector = self.vector_ranks(qv, list(names))
        fused = fuse([keyword, vector])
        pool = fused[: max(limit, RERANK_CANDIDATES) if rerank else limit]
        stored = self.store.passages([pid for pid, _ in pool])
        pool = [(pid, s) for pid, s in pool if pid in stored]
        if rerank is not None and pool:
            scores = rerank(query, [stored[pid].text for pid, _ in pool])
            pool = sorted(zip([pid for pid, _ in pool], scores, strict=True), key=lambda x: -x[1])
        k_rank = {pid: i + 1 for i, pid in enumerate(keyword)}
        v_rank = {pid: i + 1 for i, pid in enumerate(vector)}
        return [
            Hit(
                pid,
                names.get(stored[pid].collection, ""),
                stored[pid].file,
                stored[pid].ordinal,
                stored[pid].page,
                stored[pid].heading,
                stored[pid].text,
                float(score),
                k_rank.get(pid),
                v_rank.get(pid),
            )
            for pid, score in pool[:limit]
        ]

    def keyword_ranks(self, query: str, collections: list[int], limit: int = CANDIDATES) -> list[int]:
        match = fts_query(query)
        if match is None:
            return []
        return [pid for pid, _ in self.store.keyword_search(collections, match, limit)]

    def vector_ranks(self, query_vector: np.ndarray, collections: list[int], limit: int = CANDIDATES) -> list[int]:
        norm = float(np.linalg.norm(query_vector))
        if norm == 0:
            return []
        q = query_vector / norm
        best: list[tuple[float, int]] = []
        for cid in collections:
            ids, matrix = self._matrix(cid)
            if len(ids) == 0 or matrix.shape[1] != q.shape[0]:
                continue
            sims = matrix @ q
            top = (
                np.argpartition(-sims, min(limit, len(sims) - 1))[:limit] if len(sims) > limit else np.arange(len(sims))
            )
            best += [(float(sims[i]), int(ids[i])) for i in top]
        best.sort(key=lambda x: -x[0])
        return [pid for _, pid in best[:limit]]

    def _matrix(self, collection: int) -> tuple[np.ndarray, np.ndarray]:
        version = self.store.version(collection)
        with self._lock:
            held = self._matrices.get(collection)
        if held is not None and held[0] == version:
            return held[1], held[2]
        ids, matrix = self.store.vectors(collection)
        with self._lock:
            self._matrices[collection] = (version, ids, matrix)
        return ids, matrix

    def memory_bytes(self) -> int:
        """What the cached matrices hold (the bench reports it)."""
        with self._lock:
            return sum(ids.nbytes + m.nbytes for _, ids, m in self._matrices.values())


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression for a user's words: each a quoted term (so FTS5's operators in the text are
    words, not syntax), any of them matching; words that carry no topic are dropped unless nothing else is
    left."""
    words = [w.lower() for w in _WORD.findall(query)][:64]
    if not words:
        return None
    topical = [w for w in words if w not in _STOP] or words
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(topical))


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each id scores Σ 1 / (k + rank) over the rankings it is in; best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))
