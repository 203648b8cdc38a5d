"""The API over real llama.cpp with a library of three tiny GGUFs (a chat model, a BERT embedding model, a BERT
reranker): /v1/models says what each is for, each loads for its own route, and a request to the wrong kind
of model is a 400 that says why."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from app.core.library import Library
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.server.app import create_app
from app.server.context import ServerContext
from app.server.runner import ServerThread


@pytest.fixture(scope="module")
def served(tiny_encoder_gguf, tiny_reranker_gguf, tiny_gguf_f16, tmp_path_factory) -> Iterator[tuple]:
    """(a client, the library names by kind: "chat", "encoder", "reranker", the app's ModelPool)."""
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    from app.core.engines import default_registry
    from app.core.library import import_path

    folder = tmp_path_factory.mktemp("rerank-server")
    library = Library(folder / "models", folder / "library.db")
    files = {"chat": tiny_gguf_f16, "encoder": tiny_encoder_gguf, "reranker": tiny_reranker_gguf}
    names = {kind: import_path(library, path).imported[0].name for kind, path in files.items()}
    host = ModelPool(default_registry(), resolver=ModelResolver(library), name="test-rerank-host")
    context = ServerContext(host, library, host.resolver)  # type: ignore[arg-type]
    runner = ServerThread(create_app(context), "127.0.0.1", 0, context.cancel_streams)
    runner.start()
    with httpx.Client(base_url=runner.url, timeout=120) as c:
        yield c, names, host
    runner.stop(5)
    host.shutdown(10)
    library.close()


def test_models_say_what_each_model_is_for(served):
    client, names, _ = served
    listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    models = {kind: listed[name] for kind, name in names.items()}
    assert {kind: m["role"] for kind, m in models.items()} == {
        "chat": "chat",
        "encoder": "embedding",
        "reranker": "rerank",
    }
    caps = {name: m["capabilities"] for name, m in models.items()}
    assert caps["chat"]["chat"] and caps["chat"]["embeddings"] and not caps["chat"]["rerank"]
    assert caps["encoder"]["embeddings"] and not caps["encoder"]["chat"] and not caps["encoder"]["rerank"]
    assert caps["reranker"]["rerank"] and not caps["reranker"]["chat"] and not caps["reranker"]["embeddings"]
    assert models["encoder"]["context_length"] == 256  # its trained length


def test_the_reranker_ranks_and_the_encoder_embeds(served):
    client, names, _ = served
    body = {"model": names["reranker"], "query": "capital of france", "documents": ["paris", "the cat", "bread"]}
    r = client.post("/v1/rerank", json={**body, "top_n": 2, "return_documents": True})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2 and results[0]["relevance_score"] >= results[1]["relevance_score"]
    for x in results:
        assert math.isfinite(x["relevance_score"]) and x["document"]["text"] == body["documents"][x["index"]]
    assert r.json()["usage"]["prompt_tokens"] > 0
    r = client.post("/v1/embeddings", json={"model": names["encoder"], "input": ["the fire", "paris"]})
    assert r.status_code == 200, r.text
    assert [len(d["embedding"]) for d in r.json()["data"]] == [32, 32]


def test_chat_embeddings_and_rerank_models_stay_loaded_side_by_side(served):
    client, names, pool = served
    chat = {"model": names["chat"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    asks = [
        ("/v1/chat/completions", chat),
        ("/v1/embeddings", {"model": names["encoder"], "input": "the fire"}),
        ("/v1/rerank", {"model": names["reranker"], "query": "fire", "documents": ["the fire", "bread"]}),
    ]
    for path, body in asks:
        assert client.post(path, json=body).status_code == 200
    engines = {r.key: r.state.model for r in pool.residents()}
    assert len(engines) == 3 and all(info is not None for info in engines.values())
    for path, body in asks * 2:  # each on its own model: nothing loads again
        assert client.post(path, json=body).status_code == 200
    assert {r.key: r.state.model for r in pool.residents()} == engines


def test_the_wrong_kind_of_model_is_a_400_that_says_why(served):
    client, names, _ = served
    chat = {"model": names["encoder"], "messages": [{"role": "user", "content": "hi"}]}
    r = client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 400 and "embedding model" in r.json()["error"]["message"]
    r = client.post("/v1/embeddings", json={"model": names["reranker"], "input": "hi"})
    assert r.status_code == 400 and "reranker" in r.json()["error"]["message"]
    r = client.post("/v1/rerank", json={"model": names["chat"], "query": "hi", "documents": ["hi"]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"
    r = client.post("/v1/messages/count_tokens", json={"model": names["reranker"], "messages": chat["messages"]})
    assert r.status_code == 400 and "reranker" in r.json()["error"]["message"]


def test_the_wrong_kind_of_model_is_refused_before_it_loads(served):
    client, names, pool = served
    assert client.post("/models/unload", json={"model": names["encoder"]}).status_code in (200, 400)
    chat = {"model": names["encoder"], "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/chat/completions", json=chat).status_code == 400
    assert all(r.name != names["encoder"] + ".gguf" and "encoder" not in r.name for r in pool.residents())
