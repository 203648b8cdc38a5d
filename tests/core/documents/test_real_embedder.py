"""Documents on a real engine: a tiny BERT GGUF embeds a folder through EmbedJobs on an engine host, the
query finds the passage that shares its words, and a passage of more tokens than the model reads is embedded
from its start instead of failing the file."""

from __future__ import annotations

import threading

import pytest

from app.core.documents.embedding import EmbeddingFailed, JobEmbedder, models_for
from app.core.documents.indexer import Indexer
from app.core.documents.parsing import parse_file
from app.core.documents.search import Searcher
from app.core.engines import default_registry
from app.core.library import Library, import_path
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.resolve import ModelResolver


@pytest.fixture
def encoder_host(tmp_path, tiny_encoder_gguf, tiny_gguf_f16):
    library = Library(tmp_path / "models", tmp_path / "library.db")
    for path in (tiny_encoder_gguf, tiny_gguf_f16):
        import_path(library, path)
    resolver = ModelResolver(library, lambda: None)
    host = EngineHost(default_registry(), resolver=resolver, name="docs-test")
    yield library, resolver, host
    host.shutdown(10)
    library.close()


def test_a_folder_is_embedded_by_a_real_model_and_searched(encoder_host, store, tmp_path):
    library, resolver, host = encoder_host
    (model,) = models_for(library, resolver.role)  # the encoder, not the chat model
    assert "encoder" in model.path.name and models_for(library, resolver.role, "chat")[0] != model
    jobs: list = []
    embedder = JobEmbedder(
        lambda job: (jobs.append(job), host.submit(job))[1], model.name, resolver.context_length(model)
    )
    root = tmp_path / "docs"
    root.mkdir()
    (root / "fire.md").write_text("# Hearth\n\nthe fire is warm in the hearth stone\n")
    (root / "river.md").write_text("the river runs by the city of paris\n")
    # more tokens than the model's 256: every letter is a token of the tiny vocabulary
    (root / "dense.txt").write_text("".join("qz" for _ in range(290)))
    c = store.create_collection("docs", model.name)
    indexer = Indexer(store, embedder, parse=parse_file)
    indexer.add(c, [root])
    result = indexer.run(c)
    assert (result.indexed, result.failed) == (3, 0)
    c = store.collection("docs")
    assert c.dims and c.dims > 0 and c.passages == 3
    dense = [j.texts[0] for j in jobs if len(j.texts) == 1 and j.texts[0].startswith("qz")]
    assert len(dense[-1]) < 256 < len(dense[0])  # refused whole, then embedded from its start
    ids, _ = store.vectors(c.id)
    assert "qz" * 290 in [p.text for p in store.passages(ids.tolist()).values()]  # the passage is stored whole
    hits = Searcher(store).search("warm fire", [c], limit=3, embed=embedder.embed, mode="vector")
    assert len(hits) == 3 and all(h.vector_rank for h in hits)
    hits = Searcher(store).search("warm fire", [c], limit=1, embed=embedder.embed)
    assert hits[0].file.name == "fire.md" and hits[0].heading == "Hearth"


def test_a_stopped_embedder_submits_nothing_and_says_so(encoder_host):
    library, resolver, host = encoder_host
    (model,) = models_for(library, resolver.role)
    cancel = threading.Event()
    cancel.set()
    embedder = JobEmbedder(host.submit, model.name, 256, cancel)
    with pytest.raises(EmbeddingFailed) as info:
        embedder.embed(["the fire"] * 64)
    assert info.value.code == "cancelled" and host.queue_depth == 0
    # the host is free for the next job
    assert JobEmbedder(host.submit, model.name, 256).embed(["the fire"]).shape[0] == 1
