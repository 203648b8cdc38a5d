"""Fill in the middle on real llama.cpp: a tiny GGUF that names its FIM tokens gets the prefix, the suffix and
the middle marker in that order around the text tokens, and generates after them; a model without them
(SmolLM2) refuses `suffix` before anything is evaluated. Family spellings are found by their text."""

from __future__ import annotations

import threading

import pytest

from app.core.engines import collect
from app.core.engines.base import GenerateRequest, SamplingParams
from app.core.engines.errors import Unsupported
from app.core.engines.inputs.fill_in_middle import MARKERS, FimTokens, find_by_text
from tests.core.engines.fixtures import load_llamacpp

# Three of the tiny vocabulary's reserved control tokens, named as FIM tokens in the file's metadata.
PRE, SUF, MID = 300, 301, 302
FIM_METADATA = {
    "tokenizer.ggml.fim_pre_token_id": PRE,
    "tokenizer.ggml.fim_suf_token_id": SUF,
    "tokenizer.ggml.fim_mid_token_id": MID,
}


@pytest.fixture(scope="module")
def fim_engine(tiny_models_dir):
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    path = write_tiny_llama_gguf(tiny_models_dir / "fim-F16.gguf", dtype="F16", metadata=FIM_METADATA)
    engine = load_llamacpp(path, n_ctx=256)
    yield engine
    engine.unload()


def test_the_prompt_is_prefix_suffix_middle_around_the_text(fim_engine):
    before, after = "def add(a, b):\n    return", "\n\nprint(add(1, 2))"
    ids = fim_engine.prompt_tokens(GenerateRequest(prompt=before, suffix=after))
    assert ids == [PRE, *fim_engine.tokenize(before), SUF, *fim_engine.tokenize(after), MID]


def test_text_cannot_forge_the_fim_tokens(fim_engine):
    ids = fim_engine.prompt_tokens(GenerateRequest(prompt="<|reserved_300|>", suffix="x"))
    assert ids.count(PRE) == 1 and ids.index(PRE) == 0  # the text's look-alike is text


def test_a_fim_request_generates_after_the_middle_marker(fim_engine):
    request = GenerateRequest(
        prompt="The capital", suffix=" is Paris.", sampling=SamplingParams(temperature=0.0, max_tokens=4)
    )
    text, final = collect(fim_engine.generate(request, threading.Event()))
    assert isinstance(text, str)
    assert final.stats is not None and final.stats.generated_tokens == 4
    assert final.stats.prompt_tokens == len(fim_engine.prompt_tokens(request))


def test_a_model_without_fim_tokens_refuses_suffix_naming_it(smollm2_engine):
    with pytest.raises(Unsupported, match="does not support insert") as caught:
        smollm2_engine.prompt_tokens(GenerateRequest(prompt="def f():", suffix="return 1"))
    assert caught.value.details["param"] == "suffix"
    # the same model without a suffix is unchanged
    assert smollm2_engine.prompt_tokens(GenerateRequest(prompt="def f():"))


@pytest.mark.parametrize("names", MARKERS, ids=lambda names: names[0])
def test_each_familys_spelling_is_found_by_its_text(names):
    vocab = {"a": 0, **{name: 10 + i for i, name in enumerate(names)}}
    assert find_by_text(vocab.get) == FimTokens(10, 11, 12)


def test_two_of_three_tokens_is_not_fim():
    vocab = {"<|fim_prefix|>": 5, "<|fim_suffix|>": 6}
    assert find_by_text(vocab.get) is None
