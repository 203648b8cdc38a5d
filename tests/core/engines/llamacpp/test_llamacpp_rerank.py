"""An embedding model and a reranker on real llama.cpp (the tiny BERTs): the encoder embeds and refuses to
rank or chat, the reranker scores one finite number per document and refuses to embed, pairs are laid out
as llama-server lays them (or by the file's rerank template), and the bounds and cancel hold."""

from __future__ import annotations

import math
import threading

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.errors import ContextLengthExceeded, Unsupported
from app.core.engines.inputs.embed_limits import EmbeddingCancelled
from app.core.engines.inputs.rerank_limits import PairTooLong
from app.core.engines.llamacpp.rerank import PairFormat
from tests.core.engines.fixtures import chat_request, load_llamacpp
from tests.fixtures.tiny_encoder_gguf import CLS_ID, SEP_ID, write_tiny_bert_gguf

DOCS = ["paris is the capital of france", "the cat", "warm bread by the fire"]


def test_the_encoder_embeds_unit_vectors_and_refuses_to_rank_or_chat(tiny_encoder_engine):
    engine = tiny_encoder_engine
    caps = engine.capabilities
    assert (caps.embeddings, caps.rerank, caps.chat, caps.completion) == (True, False, False, False)
    result = engine.embed(["the fire is warm", "paris"])
    assert [len(v) for v in result.vectors] == [32, 32]  # the tiny BERT's n_embd
    for vector in result.vectors:
        assert all(math.isfinite(x) for x in vector) and abs(math.fsum(x * x for x in vector) - 1.0) < 1e-4
    assert result.vectors[0] != result.vectors[1] and result.prompt_tokens == 6 + 3  # [CLS] … [SEP] each
    with pytest.raises(Unsupported, match="embedding model, not a reranker"):
        engine.rerank("what", ["x"])
    with pytest.raises(Unsupported, match="embedding model: it serves POST /v1/embeddings"):
        engine.generate(chat_request("hi"), threading.Event())


def test_the_reranker_scores_each_document_and_refuses_to_embed(tiny_reranker_engine):
    engine = tiny_reranker_engine
    caps = engine.capabilities
    assert (caps.rerank, caps.embeddings, caps.chat) == (True, False, False)
    ranked = engine.rerank("what is the capital of france", DOCS)
    assert len(ranked.scores) == len(DOCS) and all(math.isfinite(s) for s in ranked.scores)
    assert len(set(ranked.scores)) == len(DOCS)  # each pair decoded on its own
    again = engine.rerank("what is the capital of france", list(reversed(DOCS)))
    assert again.scores == pytest.approx(list(reversed(ranked.scores)), abs=1e-5)  # in the documents' order
    # Each pair is [CLS] query [SEP] document [SEP].
    query_tokens = len(engine.tokenize("what is the capital of france"))
    assert ranked.prompt_tokens == sum(query_tokens + len(engine.tokenize(d)) + 3 for d in DOCS)
    with pytest.raises(Unsupported, match="reranker: it scores documents"):
        engine.embed(["x"])
    with pytest.raises(Unsupported, match="reranker: it serves POST /v1/rerank"):
        engine.generate(chat_request("hi"), threading.Event())


def test_pairs_are_laid_out_as_llama_server_lays_them(tiny_reranker_engine):
    engine = tiny_reranker_engine
    form = PairFormat.of(engine._lib, engine._llm._model.vocab, None)
    assert (form.bos, form.eos, form.sep) == (CLS_ID, SEP_ID, None)
    n_query, (pair,) = form.pairs(lambda t, s: engine.tokenize(t, special=s), "the cat", ["warm [SEP] fire"])
    cat, warm = engine.tokenize("the cat"), engine.tokenize("warm [SEP] fire")
    assert n_query == len(cat) and pair == [CLS_ID, *cat, SEP_ID, *warm, SEP_ID]
    assert warm.count(SEP_ID) == 0  # a document's text cannot write a control token into its pair


def test_a_rerank_template_from_the_file_lays_out_the_pair(tmp_path):
    template = "[CLS] query: {query} [SEP] document: {document} [SEP]"
    path = write_tiny_bert_gguf(tmp_path / "templated.gguf", rerank=True, rerank_template=template)
    engine = load_llamacpp(path, n_ctx=256, n_batch=256, n_ubatch=256, embedding=True, pooling="rank")
    try:
        form = PairFormat.of(engine._lib, engine._llm._model.vocab, engine._vectors.rerank_template)
        assert form.template == template
        _, (pair,) = form.pairs(lambda t, s: engine.tokenize(t, special=s), "cat", ["[SEP] dog"])
        assert pair[0] == CLS_ID and pair[-1] == SEP_ID and pair.count(SEP_ID) == 2  # only the template's
        assert len(engine.rerank("cat", ["dog", "the cat"]).scores) == 2
    finally:
        engine.unload()


def test_a_pair_over_the_context_fails_before_any_is_scored(tiny_reranker_engine):
    with pytest.raises(PairTooLong) as caught:
        tiny_reranker_engine.rerank("cat", ["dog", "a " * 300])
    assert isinstance(caught.value, ContextLengthExceeded)
    assert caught.value.details["param"] == "documents" and caught.value.details["index"] == 1
    with pytest.raises(PairTooLong, match="the query has"):
        tiny_reranker_engine.rerank("a " * 300, ["dog"])


def test_a_cancelled_rerank_stops_between_documents(tiny_reranker_engine):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(EmbeddingCancelled, match="reranking cancelled after 0 of 4 documents"):
        tiny_reranker_engine.rerank("cat", ["dog"] * 4, cancel)
    assert len(tiny_reranker_engine.rerank("cat", ["dog"]).scores) == 1  # the engine is fine afterwards


def test_rank_pooling_on_a_file_without_a_head_is_refused_before_llama_cpp_loads_it(tiny_encoder_gguf):
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    engine = LlamaCppEngine()
    with pytest.raises(Unsupported, match="no classification head"):
        engine.load(LoadSpec(path=tiny_encoder_gguf, n_ctx=256, embedding=True, pooling="rank"))
    assert engine.info is None
