"""Deterministic replies on the batched llama.cpp path (LoadSpec.deterministic, llamacpp.exact): a prompt gets
the same tokens and the same logprobs, to the bit, alone, among other requests, and again from its slot's cache.

llama.cpp's CPU kernels are not batch-invariant (one row goes through vec_dot, several through tinyBLAS), so
without the mode the logprobs of a sequence decoded beside others, or of a prompt whose last token is read
again from the cache, differ in their last bits; at a near-tie the token flips."""

from __future__ import annotations

import threading

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.errors import EngineError
from tests.core.engines.fixtures import chat_request, load_llamacpp


def run_together(engine, requests):
    """Admit every request, step until all end; per request: the (token, its logprob) pairs."""
    seqs = engine.sequences
    keys = [seqs.admit(r, threading.Event()) for r in requests]
    out: dict[object, list[tuple[int, float]]] = {k: [] for k in keys}
    while seqs.active():
        for key, chunk in seqs.step():
            if chunk.token is not None:
                out[key].append((chunk.token, chunk.logprobs.sampled.logprob))
            assert chunk.error is None
    return [out[k] for k in keys]


def greedy(prompt: str, n: int = 12) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=n, logprobs=0))


def test_a_deterministic_load_needs_each_slot_its_own_cells(tiny_gguf_f16):
    with pytest.raises(ValueError, match="kv_unified"):
        LoadSpec(path=tiny_gguf_f16, slots=2, kv_unified=True, deterministic=True)
    spec = LoadSpec(path=tiny_gguf_f16, slots=2).model_copy(update={"kv_unified": True, "deterministic": True})
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    with pytest.raises(EngineError, match="kv_unified"):
        LlamaCppEngine().load(spec)


@pytest.fixture(scope="module")
def tiny_exact(tiny_gguf_f16):
    # Chunks of 16 tokens, so the prompts below span several and a cached prefix is cut at their edges.
    engine = load_llamacpp(
        tiny_gguf_f16, n_ctx=256, slots=4, n_batch=64, n_ubatch=16, n_threads=1, deterministic=True, speculative="auto"
    )
    yield engine
    engine.unload()


LONG = "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat"


def test_tiny_deterministic_replies_are_the_same_alone_together_and_cached(tiny_exact):
    engine = tiny_exact
    assert engine.info.extra["deterministic"] and engine.info.extra["speculative"] == "off"
    assert engine.sequences.runner.cpu_share is None  # its threads stay as loaded, whatever else runs
    prompts = [LONG, "Once upon a time", "In the beginning was", LONG + " again and again"]
    engine.forget_cache()
    alone = []
    for p in prompts:
        engine.forget_cache()
        alone.append(run_together(engine, [greedy(p)])[0])
    engine.forget_cache()
    assert run_together(engine, [greedy(p) for p in prompts]) == alone  # four at once, prompts read together
    # Again, now from the slots' cached tokens: the longer prompt shares whole chunks of LONG's.
    assert run_together(engine, [greedy(prompts[3]), greedy(prompts[1])]) == [alone[3], alone[1]]
    assert run_together(engine, [greedy(LONG)]) == [alone[0]]
    # A prompt read while another sequence decodes, in the same steps.
    engine.forget_cache()
    seqs = engine.sequences
    got: dict[object, list[tuple[int, float]]] = {}

    def step() -> None:
        for key, chunk in seqs.step():
            if chunk.token is not None:
                got[key].append((chunk.token, chunk.logprobs.sampled.logprob))

    first = seqs.admit(greedy(prompts[1]), threading.Event())
    got[first] = []
    step()
    step()
    late = seqs.admit(greedy(LONG), threading.Event())
    got[late] = []
    while seqs.active():
        step()
    assert [got[first], got[late]] == [alone[1], alone[0]]


@pytest.mark.slow
def test_smollm2_a_deterministic_reply_is_the_same_under_four_concurrent_requests(smollm2_gguf):
    questions = ["What is the capital of France?", "Name three colours.", "Count to five.", "Say hello."]
    requests = [chat_request(q, max_tokens=16, logprobs=0) for q in questions]
    # One thread: no warm-up to wait for (two spin-waiting threads crawl on a busy 2-core machine), and the
    # bits do not depend on it.
    engine = load_llamacpp(smollm2_gguf, n_ctx=1024, slots=4, n_threads=1, deterministic=True, speculative="auto")
    try:
        alone = []
        for r in requests:
            engine.forget_cache()
            alone.append(run_together(engine, [r])[0])
        engine.forget_cache()
        assert run_together(engine, requests) == alone  # tokens and every logprob, to the bit
        assert run_together(engine, [requests[0]]) == [alone[0]]  # again, its prompt cached in its slot
    finally:
        engine.unload()
