"""POST /v1/rerank (and its aliases) over the FakeEngine, whose documents score the share of the query's
words they hold: the Jina/Cohere shape, ordering, top_n, return_documents, usage, and every refusal a 4xx."""

from __future__ import annotations

import pytest

from app.core.engines.inputs.rerank_limits import MAX_RERANK_DOCUMENTS
from tests.helpers import wait_until

DOCS = ["the river is cold", "a warm fire in the hearth", "warm bread", "nothing here"]


def _rerank(live, path: str = "/v1/rerank", **body):
    return live.client.post(path, json={"model": "alpha", "query": "warm fire", "documents": DOCS, **body})


def test_results_are_sorted_by_score_with_indices_and_usage(make_server):
    live = make_server()
    r = _rerank(live)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "alpha" and body["id"].startswith("rerank-")
    results = body["results"]
    assert [x["index"] for x in results] == [1, 2, 0, 3]  # both words, one word, then the ties in order
    assert [x["relevance_score"] for x in results] == [1.0, 0.5, 0.0, 0.0]
    assert all("document" not in x for x in results)
    # Pairs: the query's 2 words + each document's words + 3 markers.
    words = sum(2 + len(d.split()) + 3 for d in DOCS)
    assert body["usage"] == {"prompt_tokens": words, "total_tokens": words}
    assert live.engines[0].ranked == len(DOCS)


@pytest.mark.parametrize("path", ["/rerank", "/v1/reranking", "/reranking"])
def test_the_aliases_answer_as_v1_rerank(make_server, path):
    live = make_server()
    assert _rerank(live, path).json()["results"] == _rerank(live).json()["results"]


def test_top_n_and_return_documents_with_text_objects(make_server):
    live = make_server()
    documents = [{"text": d} for d in DOCS]
    body = _rerank(live, documents=documents, top_n=2, return_documents=True).json()
    assert body["results"] == [
        {"index": 1, "relevance_score": 1.0, "document": {"text": DOCS[1]}},
        {"index": 2, "relevance_score": 0.5, "document": {"text": DOCS[2]}},
    ]
    assert len(_rerank(live, top_n=99).json()["results"]) == len(DOCS)  # more than there are: all of them


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"documents": []}, "documents"),
        ({"documents": ["x"] * (MAX_RERANK_DOCUMENTS + 1)}, "documents"),
        ({"documents": [{"text": "x", "title": "y"}]}, "documents.0.title"),
        ({"query": "   "}, "query"),
        ({"top_n": 0}, "top_n"),
        ({"rank_fields": ["text"]}, "rank_fields"),  # a field that would change the answer is refused
    ],
)
def test_bad_bodies_are_400_naming_the_field(make_server, change, param):
    live = make_server()
    r = _rerank(live, **change)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert live.engines[0].ranked == 0


def test_a_pair_over_the_context_is_400_before_anything_is_scored(make_server):
    live = make_server(n_ctx=32)
    r = _rerank(live, documents=["fine", "w " * 40])
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "documents"
    assert "document 1" in error["message"] and live.engines[0].ranked == 0


def test_a_model_that_cannot_rerank_is_400_and_an_unknown_one_404(make_server):
    live = make_server(rerank=lambda path: path.stem == "beta")
    r = _rerank(live)  # alpha, the loaded chat model
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"
    assert "not a reranker" in r.json()["error"]["message"]
    r = _rerank(live, model="beta")  # loaded for the job (JIT), and it ranks
    assert r.status_code == 200 and r.json()["model"] == "beta"
    r = _rerank(live, model="gamma")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_the_request_log_records_the_model_and_usage(make_server):
    live = make_server()
    assert _rerank(live).status_code == 200
    assert wait_until(lambda: len(live.context.log.items()) == 1, 5)  # written as the response ends
    entry = live.context.log.items()[-1]
    assert entry.path == "/v1/rerank" and entry.model == "alpha" and entry.prompt_tokens > 0
