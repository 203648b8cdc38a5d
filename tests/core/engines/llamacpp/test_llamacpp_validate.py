"""Issue 31: the engine's load is the one door to native llama.cpp, so it validates every file it opens
(the model, each shard of a split one, a draft model) itself, whatever a caller checked before."""

from __future__ import annotations

import re
import shutil

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.errors import EngineError
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

SHAPE = {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "n_ff": 128}
NO_LAYERS = {"llama.block_count": 0}


def test_the_engine_refuses_a_hostile_model_before_llama_cpp_sees_it(tmp_path):
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    bad = write_tiny_llama_gguf(tmp_path / "bad.gguf", **SHAPE, metadata=NO_LAYERS)
    engine = LlamaCppEngine(checked=False)
    with pytest.raises(EngineError, match=re.escape("llama.block_count is 0; a model needs at least one layer")):
        engine.load(LoadSpec(path=bad, n_ctx=64))  # without the check this aborts the test process (SIGABRT)
    assert engine.info is None


def test_every_shard_of_a_split_model_is_validated(tmp_path):
    from app.core.engines.llamacpp.validate import validated_gguf

    first = write_tiny_llama_gguf(tmp_path / "m-00001-of-00002.gguf", **SHAPE)
    second = tmp_path / "m-00002-of-00002.gguf"
    write_tiny_llama_gguf(second, **SHAPE, metadata={"llama.attention.head_count_kv": 3})
    with pytest.raises(EngineError, match=re.escape("llama.attention.head_count_kv is 3; it must divide")):
        validated_gguf(first)
    shutil.copy(first, second)
    assert validated_gguf(first).architecture == "llama"
    second.unlink()
    with pytest.raises(EngineError, match=re.escape("m-00002-of-00002.gguf: No such file")):
        validated_gguf(first)


def test_a_hostile_draft_model_is_refused_before_llama_cpp_sees_it(tmp_path):
    from app.core.engines.llamacpp.draft import ModelDrafter

    model = write_tiny_llama_gguf(tmp_path / "model.gguf", **SHAPE)
    draft = write_tiny_llama_gguf(tmp_path / "draft.gguf", **SHAPE, metadata={"llama.rope.scaling.type": "bogus"})
    spec = LoadSpec(path=model, n_ctx=64, speculative="draft", draft_model=draft)
    with pytest.raises(EngineError, match=re.escape("llama.rope.scaling.type is 'bogus'")):
        ModelDrafter(None, None, spec)  # refused before the native library or the main model is touched
