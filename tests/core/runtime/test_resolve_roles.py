"""The resolver plans an embedding model and a reranker as what they are: a load for pooled output in one
sequence, without drafting, a whole input per decode, at the trained context up to ENCODER_MAX_CONTEXT; a
reranker with rank pooling. A chat model is planned as before."""

from __future__ import annotations

import pytest

from app.core.library import Library, import_path
from app.core.models.devices import GiB
from app.core.runtime.load_plan import ENCODER_MAX_CONTEXT
from app.core.runtime.resolve import ModelResolver
from tests.core.runtime.test_preflight import machine
from tests.fixtures.tiny_encoder_gguf import write_tiny_bert_gguf


@pytest.fixture
def library(tmp_path, tiny_encoder_gguf, tiny_reranker_gguf, tiny_gguf_f16):
    library = Library(tmp_path / "models", tmp_path / "library.db")
    for path in (tiny_encoder_gguf, tiny_reranker_gguf, tiny_gguf_f16):
        import_path(library, path)
    yield library
    library.close()


def _model(library, stem):
    (model,) = [m for m in library.list() if stem in m.path.name]
    return model


@pytest.mark.parametrize("machine_of", [lambda: None, lambda: machine(64 * GiB)], ids=["unplanned", "planned"])
def test_an_encoder_loads_for_embeddings_and_a_reranker_with_rank_pooling(library, machine_of):
    resolver = ModelResolver(library, machine_of, speculative="auto")
    encoder, reranker, chat = (_model(library, s) for s in ("encoder", "reranker", "tiny-llama"))
    embed = resolver(encoder.name).spec
    assert embed.embedding and embed.pooling is None  # the model's own (CLS) pooling
    assert (embed.n_ctx, embed.n_batch, embed.n_ubatch) == (256, 256, 256)  # its trained length, one decode
    assert (embed.slots, embed.speculative, embed.draft_model) == (1, "off", None)
    rank = resolver(reranker.name).spec
    assert rank.embedding and rank.pooling == "rank" and rank.slots == 1 and rank.speculative == "off"
    load = resolver(chat.name).spec
    assert not load.embedding and load.pooling is None
    assert [resolver.role(m) for m in (encoder, reranker, chat)] == ["embedding", "rerank", "chat"]


def test_an_encoder_context_is_bounded(tmp_path):
    path = write_tiny_bert_gguf(tmp_path / "long-encoder.gguf", n_ctx=32768)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, path).imported[0]
    try:
        spec = ModelResolver(library, lambda: machine(64 * GiB), max_context=0).load_spec(model)
        assert spec.embedding and spec.n_ctx == spec.n_ubatch == ENCODER_MAX_CONTEXT
        assert ModelResolver(library, lambda: None, max_context=1024).load_spec(model).n_ctx == 1024
    finally:
        library.close()
