"""The documents store and hybrid search: BM25 finds exact terms, vectors find shared meaning, rank fusion
joins them, a reranker orders the best; FTS5 syntax in a query is only words; a collection's files and
passages go with it; the database is the user's alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from app.core.documents.passages import Passage
from app.core.documents.search import Searcher, fts_query, fuse
from app.core.documents.store import INDEXED, DocumentsError, DocumentStore
from tests.core.documents.conftest import word_vector


def _fill(store: DocumentStore, name: str, docs: dict[str, list[str]], embed=word_vector) -> int:
    c = store.create_collection(name, "word-bag")
    store.mark_found_many(c.id, [(Path(f"/docs/{f}"), 1, 1.0) for f in docs])
    for f, texts in docs.items():
        row = store.file(c.id, Path(f"/docs/{f}"))
        store.start_file(row.id, f"sha-{f}", None, len(texts))
        passages = [Passage(i, t, i + 1, "") for i, t in enumerate(texts)]
        store.add_passages(c.id, row.id, passages, np.stack([embed(t) for t in texts]))
        store.set_state(row.id, INDEXED)
    return c.id


DOCS = {
    "release.md": ["Version 2.4.1 fixed the crash on startup.", "The kettle boils water for tea."],
    "garden.md": ["Tomatoes need sun and water every day.", "Prune the roses in early spring."],
    "errors.md": ["Error E1042 means the disk is full.", "Restart the hearth service after an update."],
}


def test_keyword_vector_and_hybrid_search_find_the_right_passages(store):
    _fill(store, "notes", DOCS)
    c = store.collection("notes")
    s = Searcher(store)
    hit = s.search("what does E1042 mean", [c], limit=1, mode="keyword")[0]
    assert hit.text.startswith("Error E1042") and hit.keyword_rank == 1 and hit.vector_rank is None
    hit = s.search("water for tea", [c], limit=1, embed=lambda t: np.stack([word_vector(x) for x in t]), mode="vector")[
        0
    ]
    assert "kettle" in hit.text and hit.vector_rank == 1
    hits = s.search("roses spring", [c], limit=3, embed=lambda t: np.stack([word_vector(x) for x in t]))
    assert hits[0].text.startswith("Prune the roses") and hits[0].keyword_rank == 1 and hits[0].vector_rank == 1
    assert hits[0].file == Path("/docs/garden.md") and hits[0].page == 2 and hits[0].collection == "notes"
    assert len(hits) == 3 and hits[0].score > hits[1].score


def test_a_reranker_orders_the_fused_candidates(store):
    _fill(store, "notes", DOCS)
    c = store.collection("notes")
    # A reranker that prefers the passage about the crash, which the query's words do not name.
    hits = Searcher(store).search(
        "water", [c], limit=2, rerank=lambda q, texts: [1.0 if "crash" in t else 0.0 for t in texts], mode="keyword"
    )
    # the crash passage shares no word with the query, so keywords never offered it: the reranker reorders
    # only what came back
    assert all("water" in h.text.lower() for h in hits)
    hits = Searcher(store).search(
        "water crash",
        [c],
        limit=3,
        rerank=lambda q, texts: [1.0 if "crash" in t else 0.0 for t in texts],
        mode="keyword",
    )
    assert "crash" in hits[0].text and hits[0].score == 1.0


@pytest.mark.parametrize(
    "query", ['"unbalanced', "a AND OR NOT", "col:umn*", "NEAR(a b)", "-x +y ^z", "'; DROP TABLE passages; --"]
)
def test_fts5_syntax_in_a_query_is_read_as_words(store, query):
    _fill(store, "notes", DOCS)
    c = store.collection("notes")
    Searcher(store).search(query, [c], mode="keyword")  # no sqlite3.OperationalError
    assert store.collection("notes").passages == 6


def test_fts_query_and_fusion():
    assert fts_query("What is the capital of France?") == '"capital" OR "france"'
    assert fts_query("the of") == '"the" OR "of"'  # only stop words: keep them rather than match nothing
    assert fts_query("!!! ???") is None
    assert fuse([[1, 2, 3], [3, 1]])[0][0] == 1 and [i for i, _ in fuse([[1, 2, 3], [3, 1]])] == [1, 3, 2]


def test_search_sees_new_passages_and_forgets_removed_files(store):
    cid = _fill(store, "notes", {"a.md": ["the lamp by the window"]})
    c = store.collection("notes")
    s = Searcher(store)
    embed = lambda t: np.stack([word_vector(x) for x in t])  # noqa: E731
    assert s.search("lamp", [c], embed=embed)[0].file == Path("/docs/a.md")
    _fill_more = store.file(cid, Path("/docs/a.md"))
    store.mark_found_many(cid, [(Path("/docs/b.md"), 1, 1.0)])
    row = store.file(cid, Path("/docs/b.md"))
    store.start_file(row.id, "x", None, 1)
    store.add_passages(cid, row.id, [Passage(0, "a brass lamp lamp lamp", None, "")], embed(["a brass lamp lamp lamp"]))
    assert {h.file.name for h in s.search("lamp", [c], embed=embed, mode="vector")} == {"a.md", "b.md"}
    store.remove_files(cid, [_fill_more.path])
    assert [h.file.name for h in s.search("lamp", [c], embed=embed)] == ["b.md"]
    assert [h.file.name for h in s.search("lamp", [c], mode="keyword")] == ["b.md"]


def test_collections_are_named_once_renamed_and_deleted_with_their_passages(store, tmp_path):
    _fill(store, "notes", DOCS)
    with pytest.raises(DocumentsError, match="already exists"):
        store.create_collection("Notes ", "m")  # names are compared without case or spaces around
    with pytest.raises(DocumentsError, match="needs a name"):
        store.create_collection("  ", "m")
    other = _fill(store, "other", {"x.md": ["kettle kettle"]})
    store.rename_collection("notes", "Kitchen")
    assert [c.name for c in store.collections()] == ["Kitchen", "other"]
    c = store.collection("kitchen")
    assert (c.files, c.passages) == (3, 6) and c.bytes > 6 * 64 * 4
    store.delete_collection("Kitchen")
    with pytest.raises(DocumentsError, match="no collection named 'Kitchen'"):
        store.collection("Kitchen")
    # the other collection's passages, and only those, are still found by keyword (its FTS rows too)
    hits = Searcher(store).search("kettle", [store.collection("other")], mode="keyword")
    assert [h.file.name for h in hits] == ["x.md"]
    assert store.keyword_search([other], '"boils"', 10) == []


def test_a_model_change_empties_the_vectors_and_reads_every_file_again(store):
    cid = _fill(store, "notes", DOCS)
    store.set_model(cid, "another-model")
    c = store.collection("notes")
    assert (c.model, c.dims, c.passages) == ("another-model", None, 0)
    assert {f.state for f in store.files(cid)} == {"pending"}


def test_vectors_of_another_width_are_refused(store):
    cid = _fill(store, "notes", {"a.md": ["one"]})
    row = store.file(cid, Path("/docs/a.md"))
    with pytest.raises(DocumentsError, match="holds 64"):
        store.add_passages(cid, row.id, [Passage(5, "x", None, "")], np.ones((1, 8), dtype=np.float32))


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_the_database_is_the_users_alone(tmp_path):
    s = DocumentStore(tmp_path / "d" / "documents.sqlite3")
    _fill(s, "notes", DOCS)
    for p in (tmp_path / "d").iterdir():
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p
    s.close()
