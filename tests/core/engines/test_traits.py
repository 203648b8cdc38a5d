"""Engine traits by format: what the chat, the resolver and /v1/models decide from before a load, kept
in line with what each engine reports once loaded."""

from __future__ import annotations

from app.core.engines.traits import traits


def test_the_gguf_engine_batches_drafts_both_ways_and_takes_grammars():
    t = traits("gguf")
    assert t.planned and t.batches and t.draft_model and t.ngram and t.grammar and t.embeddings
    assert not t.draft_alone


def test_the_mlx_engine_drafts_only_with_a_model_on_one_slot_and_takes_no_grammar():
    t = traits("mlx")
    assert t.planned and t.batches and t.draft_model and t.draft_alone
    assert not (t.ngram or t.grammar or t.embeddings or t.llama_cpp_build)


def test_a_remote_or_unknown_format_has_no_local_traits():
    for fmt in ("remote", "exl2", ""):
        t = traits(fmt)
        assert not (t.planned or t.batches or t.draft_model or t.grammar or t.embeddings)


def test_the_mlx_engine_reports_no_grammar_once_loaded_either():
    from app.core.engines.mlx import MlxEngine

    assert MlxEngine().capabilities.grammar is traits("mlx").grammar
