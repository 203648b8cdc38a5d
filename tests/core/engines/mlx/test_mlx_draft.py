"""The MLX engine with a draft model (mlx[cpu], tiny models): speculative decoding gives plain decoding's
tokens, keeps both KV caches aligned across turns, sees a cancel between prompt chunks, and refuses a
draft with another tokenizer."""

from __future__ import annotations

import threading

import pytest

from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.errors import EngineError


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    pytest.importorskip("safetensors")
    try:
        from app.core.native import import_native

        import_native("mlx.core")
        import_native("mlx_lm")
    except Exception as exc:
        pytest.skip(f"mlx / mlx-lm not importable here: {exc!r}")
    from tests.fixtures.tiny_mlx import write_tiny_mlx_model

    root = tmp_path_factory.mktemp("mlx-draft")
    # std 0.2: peaked distributions, so float rounding between a one-token and a many-token pass flips no tie.
    big = write_tiny_mlx_model(root / "big", n_layer=4, std=0.2, seed=3)
    small = write_tiny_mlx_model(root / "small", n_layer=1, n_embd=128, n_ff=256, std=0.2, seed=4)
    other = write_tiny_mlx_model(root / "other", n_layer=1, n_embd=128, n_ff=256, vocab_size=330)
    return big, small, other


def request(text: str, **sampling) -> GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 40)
    return GenerateRequest(messages=[ChatMessage(role="user", content=text)], sampling=SamplingParams(**sampling))


def run(engine, req, cancel: threading.Event | None = None):
    chunks = list(engine.generate(req, cancel or threading.Event()))
    return [c.token for c in chunks if c.token is not None], chunks[-1]


def loaded(path, draft=None, **spec):
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine(prefill_step=8)
    extra = {"speculative": "draft", "draft_model": draft, "draft_max": 4} if draft is not None else {}
    engine.load(LoadSpec(path=path, n_ctx=512, **extra, **spec))
    return engine


def test_drafting_gives_plain_decodings_tokens_and_counts_the_drafts(folders):
    big, small, _ = folders
    plain = loaded(big)
    ask = request("abc abc abc abc")
    expected, _ = run(plain, ask)
    plain.unload()
    for draft in (big, small):  # the model drafting for itself keeps every draft
        engine = loaded(big, draft)
        try:
            assert engine.info.extra["speculative"] == "draft" and engine.info.extra["draft_model"] == draft.name
            tokens, final = run(engine, ask)
            assert tokens == expected
            s = final.stats
            assert s.draft_tokens > 0 and 0 <= s.draft_accepted <= s.draft_tokens
            if draft == big:
                assert s.draft_accepted >= s.draft_tokens - 4  # all but (at most) the round cut at max_tokens
        finally:
            engine.unload()


def test_a_second_turn_reuses_both_caches(folders):
    big, small, _ = folders
    engine = loaded(big, small)
    plain = loaded(big)
    try:
        first = request("tell me about the sea", max_tokens=12)
        tokens, _ = run(engine, first)
        follow = GenerateRequest(
            messages=[
                ChatMessage(role="user", content="tell me about the sea"),
                ChatMessage(role="assistant", content=engine._tok.decode(tokens)),
                ChatMessage(role="user", content="and the sky"),
            ],
            sampling=SamplingParams(temperature=0.0, max_tokens=12),
        )
        again, final2 = run(engine, follow)
        assert final2.stats.prompt_tokens_evaluated < final2.stats.prompt_tokens  # the shared prefix was kept
        assert engine._draft is not None and engine._draft.held.tokens[:10] == engine._held.tokens[:10]
        assert again == run(plain, follow)[0]  # and the reply is still plain decoding's
    finally:
        engine.unload()
        plain.unload()


def test_sampling_with_a_seed_repeats_and_logprobs_take_the_plain_path(folders):
    big, small, _ = folders
    engine = loaded(big, small)
    try:
        hot = request("once upon a time", temperature=1.0, seed=7, max_tokens=20)
        assert run(engine, hot)[0] == run(engine, hot)[0]
        tokens, final = run(engine, request("once upon a time", logprobs=2, max_tokens=8))
        assert tokens and final.stats.draft_tokens == 0
    finally:
        engine.unload()


def test_a_cancel_is_seen_between_prompt_chunks(folders):
    big, small, _ = folders
    engine = loaded(big, small)
    try:
        cancel = threading.Event()
        cancel.set()
        tokens, final = run(engine, request("word " * 60), cancel)
        assert final.finish_reason == "cancelled" and tokens == []
        assert final.stats.prompt_tokens_evaluated < final.stats.prompt_tokens
        # The caches were left consistent: the next request still gives plain decoding's tokens.
        plain = loaded(big)
        assert run(engine, request("abc abc"))[0] == run(plain, request("abc abc"))[0]
        plain.unload()
    finally:
        engine.unload()


def test_a_draft_with_another_tokenizer_is_refused_and_slots_give_way(folders):
    big, small, other = folders
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine()
    with pytest.raises(EngineError, match="vocabulary of 330 tokens"):
        engine.load(LoadSpec(path=big, n_ctx=256, speculative="draft", draft_model=other))
    assert engine.info is None  # nothing half-loaded
    batched = loaded(big, small, slots=4)
    try:
        assert batched.sequences is None and batched.info.extra["slots"] == 1  # mlx-lm cannot batch drafts
    finally:
        batched.unload()
