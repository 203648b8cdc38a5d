"""The engine registry: each kind's abilities by format (what the chat, the resolver and /v1/models decide
from before a load, kept in line with what each engine reports once loaded; these were test_traits.py's),
and which kind runs a format for a role."""

from __future__ import annotations

import pytest

from app.core.engines import default_registry
from app.core.engines.base import Capabilities
from app.core.engines.errors import EngineError
from app.core.engines.registry import EngineRegistry, abilities


def test_the_gguf_engine_batches_drafts_both_ways_and_takes_grammars():
    t = abilities("gguf")
    assert t.planned and t.batches and t.draft_model and t.ngram and t.grammar and t.embeddings
    assert not t.draft_alone


def test_the_mlx_engine_drafts_only_with_a_model_on_one_slot_and_takes_no_grammar():
    t = abilities("mlx")
    assert t.planned and t.batches and t.draft_model and t.draft_alone
    assert not (t.ngram or t.grammar or t.embeddings or t.llama_cpp_build)


def test_a_remote_or_unknown_format_has_no_local_traits():
    for fmt in ("remote", "exl2", ""):
        t = abilities(fmt)
        assert not (t.planned or t.batches or t.draft_model or t.grammar or t.embeddings)


def test_the_mlx_engine_reports_no_grammar_once_loaded_either():
    from app.core.engines.mlx.engine import MlxEngine

    assert MlxEngine().capabilities.grammar is abilities("mlx").grammar


def test_a_kind_is_found_by_format_and_role_and_refused_clearly_otherwise():
    registry = default_registry()
    assert registry.kind("gguf", "embedding").name == registry.name("gguf")
    with pytest.raises(EngineError, match="no engine for exl2 models"):
        registry.kind("exl2")
    registry.register("speech", "whisper", lambda: None, roles=frozenset({"transcribe"}))  # type: ignore[arg-type,return-value]
    with pytest.raises(EngineError, match="whisper does not run chat models"):
        registry.kind("speech", "chat")
    assert registry.kind("speech", "transcribe").name == "whisper"


def test_a_plug_in_kind_declares_its_abilities_for_the_decisions_made_before_a_load():
    assert abilities("toy-registry-test").planned is False and abilities("toy-registry-test").chat is False
    EngineRegistry().register(
        "toy-registry-test",
        "toy",
        lambda: None,
        abilities=Capabilities(batches=True),  # type: ignore[arg-type,return-value]
    )
    assert abilities("toy-registry-test").batches and abilities("toy-registry-test").chat
