"""Embeddings requests that would hold the engine (T40): every bound refused before the first input is embedded,
the cap itself accepted, and a cancel that stops the work between two inputs (the FakeEngine) or two decodes
(llama.cpp on SmolLM2)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.core.engines.base import LoadSpec
from app.core.engines.errors import MAX_PROMPT_CHARS, ContextLengthExceeded, InvalidRequest, PromptTooLong
from app.core.engines.inputs.embed_limits import (
    EMBED_INPUT_COST,
    MAX_EMBED_CHARS,
    MAX_EMBED_INPUTS,
    MAX_EMBED_TOKENS,
    MAX_EMBED_WORK,
    EmbeddingCancelled,
    EmbeddingInputTooLong,
    EmbeddingsTooLarge,
)
from tests.fixtures.fake_engine import FakeEngine

N_CTX = 256
# Inputs of the context's length: as many as the work cap takes (each its tokens plus the per-input cost).
AT_CAP = MAX_EMBED_WORK // (N_CTX + EMBED_INPUT_COST)


def fake(**kwargs) -> FakeEngine:
    engine = FakeEngine(**kwargs)
    engine.load(LoadSpec(path=Path("m.fake"), n_ctx=N_CTX))
    return engine


# (inputs, the error, its code: the API's 400 or 413)
BOUNDS = {
    "too many inputs": (["x"] * (MAX_EMBED_INPUTS + 1), InvalidRequest, "invalid_request"),
    "one input over a prompt's characters": (
        ["x", "y" * (MAX_PROMPT_CHARS + 1)],
        PromptTooLong,
        "context_length_exceeded",
    ),
    "all inputs over the characters": (["z" * (MAX_EMBED_CHARS // 2 + 1)] * 2, EmbeddingsTooLarge, "request_too_large"),
    "one input over the context, last": (
        ["fine"] * 5 + ["w " * (N_CTX + 1)],
        EmbeddingInputTooLong,
        "context_length_exceeded",
    ),
    "all inputs over the work": (
        ["w " * N_CTX] * (AT_CAP + 1),
        EmbeddingsTooLarge,
        "request_too_large",
    ),
    "an empty input": (["fine", "  "], InvalidRequest, "invalid_request"),
}


@pytest.mark.parametrize("texts, error, code", BOUNDS.values(), ids=BOUNDS.keys())
def test_each_bound_is_refused_before_any_input_is_embedded(texts, error, code):
    engine = fake()
    with pytest.raises(error) as caught:
        engine.embed(texts)
    assert caught.value.details["param"] == "input" and caught.value.code == code
    assert engine.embedded == 0
    # and the engine embeds the next request
    assert len(engine.embed(["warm fire"]).vectors) == 1


def test_the_errors_say_which_cap_and_how_much():
    engine = fake()
    assert (AT_CAP, MAX_EMBED_WORK) == (1198, 316_384)
    with pytest.raises(
        EmbeddingsTooLarge,
        match=r"1,199 inputs hold 306,944 tokens, 316,536 counted with 8 more for each input, over the "
        r"316,384-token cap on one embeddings request",
    ) as caught:
        engine.embed(["w " * N_CTX] * 1199)
    assert caught.value.code == "request_too_large"
    assert caught.value.details == {"param": "input", "amount": 316_536, "cap": 316_384, "tokens": 306_944}
    with pytest.raises(ContextLengthExceeded, match=r"input 1 has 257 tokens but the embeddings context holds 256"):
        engine.embed(["fine", "w " * (N_CTX + 1)])
    with pytest.raises(InvalidRequest, match="2,049 inputs, over the 2,048"):
        engine.embed(["x"] * (MAX_EMBED_INPUTS + 1))


def test_a_request_at_every_cap_is_embedded():
    engine = fake()
    out = engine.embed(["w " * N_CTX] * AT_CAP)  # each input the context, up to the cap
    assert out.prompt_tokens > MAX_EMBED_TOKENS and engine.embedded == AT_CAP
    assert len(engine.embed(["x"] * MAX_EMBED_INPUTS).vectors) == MAX_EMBED_INPUTS


def test_the_cap_counts_each_input_besides_its_tokens():
    from app.core.engines.inputs.embed_limits import check_embed_tokens

    # Every request within OpenAI's own caps fits: 2,048 inputs holding (nearly) 300,000 tokens between them.
    check_embed_tokens([MAX_EMBED_TOKENS // MAX_EMBED_INPUTS] * MAX_EMBED_INPUTS, N_CTX)
    # The same tokens in more inputs is more work: 2,048 inputs of 150 tokens (307,200) are over the cap,
    # 1,024 inputs of 300 (307,200 too) are not.
    with pytest.raises(EmbeddingsTooLarge, match="counted with 8 more for each input"):
        check_embed_tokens([150] * MAX_EMBED_INPUTS, 512)
    check_embed_tokens([300] * 1024, 512)


def test_a_cancel_from_another_thread_stops_the_fake_engine_between_inputs():
    engine = fake(embed_delay_s=0.02)
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(EmbeddingCancelled) as caught:
        engine.embed([f"input {i}" for i in range(200)], cancel)  # 4 s uncancelled
    timer.join()
    assert time.monotonic() - t0 < 1.0
    assert 0 < engine.embedded < 50 and caught.value.details == {"done": engine.embedded, "total": 200}
    assert caught.value.code == "cancelled"


def test_a_cancel_set_before_embeds_nothing():
    engine = fake()
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(EmbeddingCancelled):
        engine.embed(["a", "b"], cancel)
    assert engine.embedded == 0


@pytest.mark.slow
def test_llamacpp_stops_a_multi_input_embed_between_decodes(smollm2_engine, monkeypatch):
    texts = [f"sentence number {i} is about the weather in spring" for i in range(16)]
    before = smollm2_engine.embed(texts[:2]).vectors  # also opens the side context
    embedder = smollm2_engine._vectors.embedder()
    ctx = embedder._ctx
    # Two inputs a decode (they would all fit one), so the request takes eight.
    monkeypatch.setattr(embedder, "n_seqs", 2)
    cancel, decodes = threading.Event(), []
    real_decode = ctx.decode

    def decode(batch):
        real_decode(batch)
        decodes.append(batch)
        if len(decodes) == 3:  # the client leaves during the third decode: another thread sets the flag
            setter = threading.Thread(target=cancel.set)
            setter.start()
            setter.join()

    monkeypatch.setattr(ctx, "decode", decode)
    with pytest.raises(EmbeddingCancelled) as caught:
        smollm2_engine.embed(texts, cancel)
    assert len(decodes) == 3 and caught.value.details == {"done": 6, "total": 16}
    monkeypatch.undo()
    # The context was left clean: the same inputs embed to the same vectors.
    after = smollm2_engine.embed(texts[:2]).vectors
    assert all(sum(x * y for x, y in zip(a, b)) > 0.9999 for a, b in zip(before, after))


@pytest.mark.slow
def test_llamacpp_refuses_an_input_over_its_context_before_embedding_any(smollm2_engine, monkeypatch):
    smollm2_engine.embed(["warm"])  # opens the side context
    ctx = smollm2_engine._vectors.embedder()._ctx
    decodes = []
    real_decode = ctx.decode
    monkeypatch.setattr(ctx, "decode", lambda batch: decodes.append(batch) or real_decode(batch))
    with pytest.raises(ContextLengthExceeded, match="input 2 has") as caught:
        smollm2_engine.embed(["fine", "also fine", "word " * 3000])
    assert decodes == [] and caught.value.details["param"] == "input"
