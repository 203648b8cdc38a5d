"""The MLX engine's batched path (slots > 1, mlx-lm's BatchGenerator), for real on the tiny MLX model:
sequences decoded together give, token for token, what each gives alone on the single-stream engine;
each keeps its own sampling, logprobs, stops, limit and stats; a seeded request runs alone; a slot's
KV cache serves the next request that shares its prefix."""

from __future__ import annotations

import threading

import pytest

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.decoding.sequences import common_prefix
from app.core.engines.errors import EngineError, Unsupported

PROMPTS = [
    "hello there",
    "what is the capital of a country far away",
    "a",
    "count to ten please and then some more",
]


@pytest.fixture(scope="module")
def model(tiny_pair_std02):
    pytest.importorskip("mlx_lm", reason="mlx-lm runs the MLX engine")
    return tiny_pair_std02[1]  # std 0.2: greedy replies vary, so a wrong token shows


def _load(path, **spec):
    from app.core.engines.mlx.engine import MlxEngine

    engine = MlxEngine(prefill_step=spec.pop("prefill_step", 512))
    engine.load(LoadSpec(path=path, n_ctx=512, **spec))
    alone(engine, greedy("warm up", max_tokens=2))  # the first call pays MLX's one-time costs
    return engine


@pytest.fixture(scope="module")
def single(model):
    engine = _load(model)
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def batched(model):
    engine = _load(model, slots=4)
    assert engine.sequences is not None and engine.info.extra["slots"] == 4
    yield engine
    engine.unload()


def greedy(prompt: str, **sampling) -> GenerateRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("max_tokens", 24)
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(**sampling))


def alone(engine, request):
    chunks = list(engine.generate(request, threading.Event()))
    return [c.token for c in chunks if c.token is not None], chunks


def run_together(engine, requests, cancels=None, on_step=None):
    """Admit every request, step until all end; per request: (token ids, its chunks)."""
    seqs = engine.sequences
    cancels = cancels or [threading.Event() for _ in requests]
    keys = [seqs.admit(r, c) for r, c in zip(requests, cancels)]
    chunks: dict[object, list] = {k: [] for k in keys}
    step = 0
    while seqs.active():
        for key, chunk in seqs.step():
            chunks.setdefault(key, []).append(chunk)
        step += 1
        if on_step is not None:
            on_step(step, seqs, chunks)
    return [([c.token for c in chunks[k] if c.token is not None], chunks[k]) for k in chunks]


def text_of(chunks) -> str:
    return "".join(c.text for c in chunks)


def test_four_sequences_together_give_each_one_alone(single, batched):
    requests = [
        greedy(PROMPTS[0]),
        greedy(PROMPTS[1], logprobs=3),
        greedy(PROMPTS[2], repeat_penalty=1.3, logit_bias={5: 3.0}),
        greedy(PROMPTS[3], presence_penalty=0.5, frequency_penalty=0.2),
    ]
    expected = [alone(single, r) for r in requests]
    got = run_together(batched, requests)
    for (want, want_chunks), (tokens, chunks) in zip(expected, got):
        assert tokens == want and len(tokens) == 24
        assert text_of(chunks) == text_of(want_chunks)
        assert [c.logprobs for c in chunks] == [c.logprobs for c in want_chunks]
        final = chunks[-1]
        assert final.finish_reason == want_chunks[-1].finish_reason == "length"
        s = final.stats
        assert s.generated_tokens == 24 and s.prompt_tokens == want_chunks[-1].stats.prompt_tokens
        assert s.time_to_first_token_s > 0 and s.prompt_tok_s > 0 and s.decode_tok_s > 0
    assert got[1][1][0].logprobs is not None and len(got[1][1][0].logprobs.top) == 3
    assert batched.sequences.active() == 0 and batched.sequences.free_slots() == 4


def test_stop_strings_and_max_tokens_are_exact_per_sequence(single, batched):
    _, reference = alone(single, greedy(PROMPTS[1], max_tokens=24))
    full = text_of(reference)
    stop = full[8:11]  # a stop string in the middle of the reply, maybe split across tokens
    assert stop and full.find(stop) >= 1
    requests = [greedy(PROMPTS[1], stop=[stop]), greedy(PROMPTS[0], max_tokens=5), greedy(PROMPTS[3], max_tokens=1)]
    got = run_together(batched, requests)
    stopped, five, one = (chunks for _, chunks in got)
    assert text_of(stopped) == full[: full.find(stop)]
    assert stopped[-1].finish_reason == "stop" and stopped[-1].stop_sequence == stop
    assert len(got[1][0]) == 5 and five[-1].finish_reason == "length" and five[-1].stats.generated_tokens == 5
    assert got[1][0] == alone(single, requests[1])[0]
    assert len(got[2][0]) == 1 and one[-1].finish_reason == "length"


def test_a_cancel_ends_one_sequence_and_the_others_go_on(single, batched):
    requests = [greedy(p, max_tokens=20) for p in PROMPTS[:3]]
    expected = [alone(single, r)[0] for r in requests]
    cancels = [threading.Event() for _ in requests]
    freed: list[int] = []

    def on_step(step, seqs, chunks):
        if step == 5:
            cancels[1].set()
        if cancels[1].is_set() and not freed and any(c.finish_reason for c in list(chunks.values())[1]):
            freed.append(seqs.free_slots())

    got = run_together(batched, requests, cancels, on_step)
    (a, _), (b, b_chunks), (c, _) = got
    assert a == expected[0] and c == expected[2]
    assert b_chunks[-1].finish_reason == "cancelled"
    assert 0 < len(b) < 20 and b == expected[1][: len(b)]
    assert freed and freed[0] == 2  # its slot is free at once, while the other two still run


def test_a_request_arriving_mid_stream_joins_and_the_first_keeps_streaming(single, model):
    engine = _load(model, slots=2, prefill_step=8)  # a long prompt takes several steps to read
    try:
        first = greedy(PROMPTS[0], max_tokens=30)
        late = greedy("word " * 30, max_tokens=6)
        seqs = engine.sequences
        k1 = seqs.admit(first, threading.Event())
        out: dict[object, list] = {k1: []}
        per_step: list[set] = []
        for _ in range(6):
            produced = seqs.step()
            for k, ch in produced:
                out[k].append(ch)
        k2 = seqs.admit(late, threading.Event())
        out[k2] = []
        while seqs.active():
            produced = seqs.step()
            per_step.append({k for k, ch in produced if ch.token is not None})
            for k, ch in produced:
                out[k].append(ch)
        tokens = {k: [c.token for c in v if c.token is not None] for k, v in out.items()}
        assert tokens[k1] == alone(single, first)[0]
        assert tokens[k2] == alone(single, late)[0]
        # While the late prompt is read, chunk by chunk, the first sequence gets a token every step.
        reading = [s for s in per_step if k2 not in s][: len(tokens[k1]) - 6 - 1]
        assert len(reading) >= 3 and all(k1 in s for s in reading)
        assert out[k2][-1].stats.prompt_tokens_evaluated == out[k2][-1].stats.prompt_tokens
    finally:
        engine.unload()


def test_a_seeded_request_runs_alone_and_samples_what_it_samples_on_the_single_path(single, batched):
    seeded = greedy(PROMPTS[0], temperature=0.9, seed=7, max_tokens=16)
    want = alone(single, seeded)[0]
    seqs = batched.sequences
    assert seqs.can_admit(seeded)
    seqs.admit(greedy(PROMPTS[1], max_tokens=4), threading.Event())
    assert not seqs.can_admit(seeded)
    with pytest.raises(EngineError, match="alone"):
        seqs.admit(seeded, threading.Event())
    while seqs.active():
        seqs.step()
    key = seqs.admit(seeded, threading.Event())
    assert seqs.free_slots() == 0 and not seqs.can_admit(greedy(PROMPTS[2]))  # nothing joins it
    tokens: list[int] = []
    while seqs.active():
        tokens += [c.token for k, c in seqs.step() if k is key and c.token is not None]
    assert tokens == want and not seqs.shared(key)
    assert alone(batched, seeded)[0] == want  # and again: the same seed, the same tokens


def test_a_grammar_is_refused_before_anything_runs(batched):
    seqs = batched.sequences
    request = GenerateRequest(prompt="x", grammar='root ::= "a"', sampling=SamplingParams(max_tokens=2))
    with pytest.raises(Unsupported, match="grammar"):
        seqs.admit(request, threading.Event())
    assert seqs.active() == 0 and seqs.free_slots() == 4


def test_a_slot_keeps_its_cache_for_the_next_turn(single, batched):
    first = greedy("tell me a story about the sea", max_tokens=10)
    _, chunks = alone(batched, first)
    assert chunks[-1].stats.prompt_tokens_evaluated == chunks[-1].stats.prompt_tokens
    follow = greedy("tell me a story about the sea and the wind", max_tokens=10)
    ids1, ids2 = batched.check(first), batched.check(follow)
    tokens, chunks = alone(batched, follow)
    assert chunks[-1].stats.prompt_tokens_evaluated == len(ids2) - common_prefix(ids1, ids2) < len(ids2)
    assert tokens == alone(single, follow)[0]


def test_a_conversation_evicted_from_its_slot_comes_back_from_ram(single, model):
    engine = _load(model, slots=2)
    try:
        a = greedy("the first conversation is about apples and pears", max_tokens=4)
        b = greedy("a second one, on boats", max_tokens=4)
        c = greedy("then a third: mountains", max_tokens=4)
        for r in (a, b, c):  # b evicts the warm-up's cache, c a's (the least recently used): both to RAM
            alone(engine, r)
        assert len(engine.sequences.cache) == 2
        again = greedy("the first conversation is about apples and pears, and plums", max_tokens=6)
        tokens, chunks = alone(engine, again)
        ids = engine.check(again)
        assert chunks[-1].stats.prompt_tokens_evaluated == len(ids) - common_prefix(engine.check(a), ids)
        assert tokens == alone(single, again)[0]
    finally:
        engine.unload()


def test_a_prefix_another_free_slot_holds_is_copied_and_that_slot_keeps_its_own(single, model):
    engine = _load(model, slots=3)  # the warm-up's slot, the first conversation's, and an empty one
    try:
        system = "you are a helpful assistant who answers in one short sentence. "
        first = greedy(system + "first question", max_tokens=24)
        alone(engine, first)
        seqs = engine.sequences
        holder = max(seqs.slots, key=lambda s: len(s.tokens))
        kept = list(holder.tokens)
        # Reusing that slot would drop its 24-token reply and more (> MIN_COPY_GAIN): the request goes to
        # the empty slot, starting from a copy of the shared system prompt.
        follow = greedy(system + "second one", max_tokens=6)
        ids = engine.check(follow)
        shared = common_prefix(kept, ids)
        assert shared >= 16
        tokens, chunks = alone(engine, follow)
        assert chunks[-1].stats.prompt_tokens_evaluated == len(ids) - shared
        assert holder.tokens == kept and all(s.tokens for s in seqs.slots)
        assert tokens == alone(single, follow)[0]
    finally:
        engine.unload()


def test_a_failed_step_ends_every_sequence_with_an_error_and_the_next_request_runs(single, model, monkeypatch):
    engine = _load(model, slots=2)
    try:
        seqs = engine.sequences
        keys = [seqs.admit(greedy(p, max_tokens=8), threading.Event()) for p in PROMPTS[:2]]
        seqs.step()

        def broken():
            raise RuntimeError("boom")

        monkeypatch.setattr(seqs._gen, "next", broken)
        finals = {k: c for k, c in seqs.step() if c.finish_reason}
        assert set(finals) == set(keys)
        assert all(c.finish_reason == "error" and "boom" in c.error for c in finals.values())
        assert seqs.active() == 0 and seqs.free_slots() == 2 and not any(s.tokens for s in seqs.slots)
        again = greedy(PROMPTS[0], max_tokens=8)
        assert alone(engine, again)[0] == alone(single, again)[0]  # a fresh BatchGenerator took over
    finally:
        engine.unload()


def test_float16_weights_batched_give_each_one_alone_too(tmp_path_factory):
    pytest.importorskip("mlx_lm", reason="mlx-lm runs the MLX engine")
    from tests.fixtures.tiny_mlx import write_tiny_mlx_model

    path = write_tiny_mlx_model(tmp_path_factory.mktemp("f16") / "tiny-f16", dtype="float16", std=0.2)
    one, many = _load(path), _load(path, slots=4)
    try:
        requests = [greedy(p, max_tokens=32) for p in PROMPTS]
        assert [t for t, _ in run_together(many, requests)] == [alone(one, r)[0] for r in requests]
    finally:
        one.unload()
        many.unload()


@pytest.mark.parametrize("missing", ["merge", "batch_generator"])
def test_without_a_batchable_cache_or_batch_generator_the_engine_runs_one_request_at_a_time(
    single, model, monkeypatch, missing
):
    import importlib

    gen_mod = importlib.import_module("mlx_lm.generate")  # `mlx_lm.generate` the attribute is a function
    cache_mod = importlib.import_module("mlx_lm.models.cache")

    if missing == "merge":

        class Unmergeable:  # a cache type mlx-lm cannot batch
            pass

        real = cache_mod.make_prompt_cache
        monkeypatch.setattr(cache_mod, "make_prompt_cache", lambda m, *a, **k: [Unmergeable()] * len(real(m)))
        from app.core.engines.mlx.engine import MlxEngine

        engine = MlxEngine()
        engine.load(LoadSpec(path=model, n_ctx=512, slots=4))
        monkeypatch.setattr(cache_mod, "make_prompt_cache", real)
    else:

        class OldBatchGenerator:
            def insert(self, prompts, max_tokens=None):  # before per-sequence samplers and caches
                raise AssertionError("not used")

        monkeypatch.setattr(gen_mod, "BatchGenerator", OldBatchGenerator)
        engine = _load(model, slots=4)
    try:
        assert engine.sequences is None and engine.info.extra["slots"] == 1
        request = greedy(PROMPTS[1], max_tokens=8)
        assert alone(engine, request)[0] == alone(single, request)[0]
    finally:
        engine.unload()
