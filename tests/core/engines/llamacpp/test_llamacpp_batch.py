"""The llama.cpp engine's batched path (slots > 1): sequences decoded together give what each gives alone,
each keeps its own sampler, stops and stats, and a slot's cached tokens serve the next request."""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import pytest

from app.core.engines.base import GenerateRequest, SamplingParams
from app.core.engines.decoding.sequences import PromptCache, Slot, common_prefix, pick_slot
from tests.core.engines.fixtures import chat_request, load_llamacpp

PROMPTS = ["The quick brown fox", "Once upon a time", "In the beginning", "A B C D E F G"]


def greedy(prompt: str, **sampling) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, **sampling))


def run_together(engine, requests, cancels=None):
    """Admit every request, step until all end; per request: (token ids, final chunk)."""
    seqs = engine.sequences
    cancels = cancels or [threading.Event() for _ in requests]
    keys = [seqs.admit(r, c) for r, c in zip(requests, cancels)]
    tokens: dict[object, list[int]] = {k: [] for k in keys}
    finals: dict[object, object] = {}
    while seqs.active():
        for key, chunk in seqs.step():
            if chunk.token is not None:
                tokens[key].append(chunk.token)
            if chunk.finish_reason is not None:
                finals[key] = chunk
    return [(tokens[k], finals[k]) for k in keys]


def alone(engine, request):
    chunks = list(engine.generate(request, threading.Event()))
    return [c.token for c in chunks if c.token is not None], chunks[-1]


# -- slot choice (pure) ----------------------------------------------------------------------


def test_the_slot_sharing_the_longest_prefix_wins_and_misses_go_to_an_empty_then_the_least_recently_used():
    a, b, c = Slot(0, [1, 2, 3, 4], last_used=3.0), Slot(1, [1, 2, 9], last_used=1.0), Slot(2, [], last_used=2.0)
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert pick_slot([a, b, c], [1, 2, 3, 7]) == (a, 3)
    assert pick_slot([a, b, c], [5, 6]) == (c, 0)  # a miss: an empty slot, evicting nothing
    c.tokens = [7]
    assert pick_slot([a, b, c], [5, 6]) == (b, 0)  # then the least recently used
    b.busy = True
    assert pick_slot([a, b, c], [1, 2, 9, 9]) == (a, 2)  # busy slots are never chosen
    a.busy = c.busy = True
    assert pick_slot([a, b, c], [1]) is None


def test_a_shared_system_prompt_alone_does_not_take_another_conversations_slot():
    system = [1, 2, 3]
    first = Slot(0, [*system, 10, 11, 12, 13, 14], last_used=2.0)  # conversation one, 8 tokens cached
    empty = Slot(1, [], last_used=0.0)
    assert pick_slot([first, empty], [*system, 20, 21]) == (empty, 0)  # 3 of 8 kept: below half, not reused
    assert pick_slot([first, empty], [*system, 10, 11, 12, 30]) == (first, 6)  # its own next turn


def test_with_an_empty_slot_free_a_slot_is_reused_only_if_it_loses_little():
    document = list(range(100))
    held = Slot(0, [*document, 500, 501, 502, *range(600, 630)], last_used=1.0)  # 133 cached
    empty = Slot(1, [], last_used=0.0)
    assert pick_slot([held, empty], [*document, 700]) == (empty, 0)  # would drop 33: the empty one (and a copy)
    assert pick_slot([held, empty], [*document, 500, 501, 502, *range(600, 620), 9]) == (held, 123)  # drops 10
    assert pick_slot([held], [*document, 700]) == (held, 100)  # no empty slot: reuse what is shared


def test_ties_go_to_the_least_recently_used():
    a, b = Slot(0, [1, 2, 5], last_used=5.0), Slot(1, [1, 2, 6], last_used=4.0)
    assert pick_slot([a, b], [1, 2, 7]) == (b, 2)


def test_the_prompt_cache_keeps_states_within_its_budget_and_gives_back_the_longest_prefix():
    cache = PromptCache(budget_bytes=100)
    cache.put([1, 2, 3], b"a", 40)
    cache.put([4, 5], b"b", 40)
    cache.put([1, 2, 3, 9], b"c", 40)  # supersedes [1, 2, 3] (its prefix); then 80 of 100 used
    assert len(cache) == 2 and cache.used == 80
    cache.put([7], b"d", 40)  # over budget: the oldest ([4, 5]) goes
    assert cache.take([4, 5, 6], better_than=0) is None
    assert cache.take([1, 2, 3, 9, 9], better_than=4) is None  # not better than what a slot has
    entry, shared = cache.take([1, 2, 3, 9, 9], better_than=2)
    assert (entry.data, shared) == (b"c", 4) and len(cache) == 1  # taken out: now it lives in a slot
    cache.put([8], b"e", 101)  # larger than the whole budget: not kept
    assert len(cache) == 1


# -- tiny random model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engines(tiny_gguf_f16):
    single = load_llamacpp(tiny_gguf_f16, n_ctx=512)
    batched = load_llamacpp(tiny_gguf_f16, n_ctx=512, slots=4, n_batch=64, kv_unified=False)
    yield single, batched
    batched.unload()
    single.unload()


@pytest.fixture
def tiny_pair(tiny_engines):
    yield tiny_engines
    runner = tiny_engines[1].sequences.runner
    for seq in list(runner._running):  # a failed test must not leave sequences for the next
        runner.abort(seq)


def test_tiny_four_sequences_together_give_each_one_alone(tiny_pair):
    single, batched = tiny_pair
    requests = [greedy(p, max_tokens=20) for p in PROMPTS]
    expected = [alone(single, r)[0] for r in requests]
    got = run_together(batched, requests)
    assert [t for t, _ in got] == expected
    assert sum(len(t) for t in expected) > 20  # not all of them ended at once
    assert batched.info.extra["slots"] == 4 and batched.info.n_ctx == 512  # each slot has the whole context


def test_tiny_grammar_logprobs_and_stops_work_per_sequence(tiny_pair):
    single, batched = tiny_pair
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    constrained = GenerateRequest(
        prompt="JSON:", json_schema=schema, sampling=SamplingParams(temperature=0.0, max_tokens=12)
    )
    with_logprobs = greedy("Once upon a time", max_tokens=6, logprobs=3)
    plain = greedy("In the beginning", max_tokens=16)
    # A stop string made from the plain run's own text, so it surely occurs.
    plain_text = "".join(c.text for c in single.generate(plain, threading.Event()))
    stop = plain_text[len(plain_text) // 2 :][:3]
    stopped = greedy("In the beginning", max_tokens=16, stop=[stop])
    requests = [constrained, with_logprobs, stopped]
    expected = [list(single.generate(r, threading.Event())) for r in requests]
    seqs = batched.sequences
    keys = [seqs.admit(r, threading.Event()) for r in requests]
    got: dict[object, list] = {k: [] for k in keys}
    while seqs.active():
        for key, chunk in seqs.step():
            got[key].append(chunk)
    for key, want in zip(keys, expected):
        chunks = got[key]
        assert "".join(c.text for c in chunks) == "".join(c.text for c in want)
        assert chunks[-1].finish_reason == want[-1].finish_reason
    lp_got = [c.logprobs for c in got[keys[1]] if c.token is not None]
    lp_want = [c.logprobs for c in expected[1] if c.token is not None]
    assert [x.sampled.id for x in lp_got] == [x.sampled.id for x in lp_want]
    assert [len(x.top) for x in lp_got] == [3] * len(lp_got)
    assert [x.sampled.logprob for x in lp_got] == pytest.approx([x.sampled.logprob for x in lp_want], abs=1e-3)
    assert got[keys[2]][-1].stop_sequence == stop and stop not in "".join(c.text for c in got[keys[2]])


def test_tiny_a_cancelled_sequence_ends_and_frees_its_slot_while_the_others_go_on(tiny_pair):
    single, batched = tiny_pair
    seqs = batched.sequences
    # Three prompts that none of them ends early on this random model, so a short one is the cancel's doing.
    candidates = [greedy(f"{p} {n}", max_tokens=12) for n in range(6) for p in PROMPTS]
    requests = [r for r in candidates if len(alone(single, r)[0]) == 12][:3]
    assert len(requests) == 3
    expected = [alone(single, r)[0] for r in requests]
    cancels = [threading.Event() for _ in requests]
    keys = [seqs.admit(r, c) for r, c in zip(requests, cancels)]
    tokens: dict[object, list[int]] = {k: [] for k in keys}
    finals = {}
    while seqs.active():
        for key, chunk in seqs.step():
            if chunk.token is not None:
                tokens[key].append(chunk.token)
                if key is keys[1] and len(tokens[key]) == 3:
                    cancels[1].set()
            if chunk.finish_reason:
                finals[key] = chunk.finish_reason
        if finals.get(keys[1]) == "cancelled" and len(finals) == 1:
            assert seqs.free_slots() == 2  # at once, while the other two still run
    assert finals == {keys[0]: "length", keys[1]: "cancelled", keys[2]: "length"}
    assert tokens[keys[0]] == expected[0] and tokens[keys[2]] == expected[2]
    assert tokens[keys[1]] == expected[1][:3]


def test_tiny_a_slot_keeps_its_tokens_for_the_next_turn(tiny_pair):
    _, batched = tiny_pair
    first = greedy("Alpha beta gamma delta epsilon", max_tokens=8)
    (toks, final), *_ = run_together(batched, [first])
    from app.core.engines.llamacpp.prompt import token_piece

    text = "".join(token_piece(batched._lib, batched._llm._model.vocab, t).decode() for t in toks)
    follow = greedy("Alpha beta gamma delta epsilon" + text + " zeta eta", max_tokens=4)
    (_, again), *_ = run_together(batched, [follow])
    cached = again.stats.prompt_tokens - again.stats.prompt_tokens_evaluated
    assert cached >= final.stats.prompt_tokens  # the whole first prompt (and maybe the reply) was reused
    assert again.stats.prompt_tokens_evaluated <= again.stats.prompt_tokens - final.stats.prompt_tokens


@pytest.mark.parametrize("unified", [False, True])
def test_tiny_a_conversation_evicted_from_its_slot_comes_back_from_ram(tiny_gguf_f16, unified):
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=512, slots=2, n_batch=64, kv_unified=unified)
    single = load_llamacpp(tiny_gguf_f16, n_ctx=512)
    try:
        prompts = {c: f"{c} {c} conversation number {i} says hello" for i, c in enumerate("xyz")}
        firsts = {c: run_together(engine, [greedy(p, max_tokens=6)])[0][1] for c, p in prompts.items()}
        assert all(f.stats.prompt_tokens_evaluated >= f.stats.prompt_tokens - 1 for f in firsts.values())
        assert len(engine.sequences.runner.cache) == 1  # x was evicted for z, and kept in RAM
        for c, p in prompts.items():  # each comes back: from a slot, or restored from RAM
            follow = greedy(p + " and goodbye", max_tokens=6)
            (tokens, again), *_ = run_together(engine, [follow])
            assert again.stats.prompt_tokens - again.stats.prompt_tokens_evaluated >= firsts[c].stats.prompt_tokens - 1
            assert tokens == alone(single, follow)[0]  # a restored state computes what a fresh one does
    finally:
        engine.unload()
        single.unload()


def test_tiny_two_agents_on_one_slot_sharing_a_system_prompt_read_only_their_new_turns(tiny_gguf_f16):
    """Slot-starved: each conversation shares the long system prompt with the other, so the slot is reused
    for it, but the other's own turns it drops are saved to RAM first and restored when it comes back."""
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=1024, slots=1, n_batch=64)
    single = load_llamacpp(tiny_gguf_f16, n_ctx=1024)
    try:
        system = " ".join(f"rule {i} keep module {i} tested." for i in range(12))
        history = {who: f"{system} agent {who}: " + " ".join(f"step {who}{i} done." for i in range(4)) for who in "ab"}
        for who in "ab":
            run_together(engine, [greedy(history[who], max_tokens=4)])
        for turn in range(2):
            for who in "ab":
                history[who] += f" then step {who} turn {turn}."
                request = greedy(history[who], max_tokens=4)
                (tokens, final), *_ = run_together(engine, [request])
                new_tokens = final.stats.prompt_tokens_evaluated
                assert new_tokens < 16, (who, turn, new_tokens)  # only the new turn (and the last reply)
                assert tokens == alone(single, request)[0]
    finally:
        engine.unload()
        single.unload()


def test_tiny_a_full_shared_context_ends_the_newest_sequence_first(tiny_gguf_f16):
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=256, slots=2, n_batch=32, kv_unified=True)
    try:
        assert engine.info.n_ctx == 256  # shared: a sequence alone may use all of it
        (old_tokens, old), (new_tokens, new) = run_together(engine, [greedy("One two three"), greedy("Four five")])
        assert old.finish_reason == "length" and new.finish_reason == "length"
        assert len(old_tokens) > len(new_tokens)  # the older one kept going once the newer gave way
        # The newer gave way when the two filled the cells; then the older took the cells it left.
        assert new.stats.prompt_tokens + len(new_tokens) < 256 // 2 + 8
        assert 250 <= old.stats.prompt_tokens + len(old_tokens) <= 256 + 1  # +1: the last sample is not stored
        # Alone, a sequence takes every cell, the idle slot's cached tokens evicted for it.
        (tokens, final), *_ = run_together(engine, [greedy("Seven eight")])
        assert final.finish_reason == "length" and final.stats.prompt_tokens + len(tokens) >= 250
    finally:
        engine.unload()


def test_tiny_generate_on_a_batched_engine_runs_one_request(tiny_pair):
    single, batched = tiny_pair
    request = greedy("The quick brown fox", max_tokens=10)
    assert alone(batched, request)[0] == alone(single, request)[0]
    # A caller that stops reading frees the slot.
    stream = batched.generate(request, threading.Event())
    next(stream)
    stream.close()
    assert batched.sequences.active() == 0 and batched.sequences.free_slots() == 4


# -- SmolLM2 ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_four_chats_together_give_each_one_alone(smollm2_engine, smollm2_gguf):
    questions = ["What is the capital of France?", "Name three colours.", "Count to five.", "Say hello."]
    requests = [chat_request(q, max_tokens=24) for q in questions]
    expected = [alone(smollm2_engine, r)[0] for r in requests]
    batched = load_llamacpp(smollm2_gguf, n_ctx=2048, slots=4, kv_unified=False)
    try:
        got = run_together(batched, requests)
    finally:
        batched.unload()
    assert [t for t, _ in got] == expected
    assert all(f.stats.prompt_tokens_evaluated == f.stats.prompt_tokens for _, f in got)


# -- the planner's memory for N slots ---------------------------------------------------------

_REPORT = re.compile(
    r"llama_kv_cache: size =\s+([\d.]+) MiB|CPU\s+output buffer size =\s+([\d.]+) MiB|"
    r"CPU compute buffer size =\s+([\d.]+) MiB"
)


def reported_slot_context(path, n_ctx: int, slots: int, unified: bool) -> dict[str, float]:
    """Open a context the way the batched engine does, in a child process (llama.cpp logs from C), and
    read llama.cpp's own buffer report, in MiB."""
    code = (
        "import llama_cpp\nfrom llama_cpp import _internals as I\n"
        f"llm = llama_cpp.Llama(model_path={str(path)!r}, n_ctx=64, n_batch=64, n_ubatch=64, verbose=True)\n"
        "p = type(llm.context_params).from_buffer_copy(llm.context_params)\n"
        f"p.n_ctx = {n_ctx if unified else n_ctx * slots}; p.n_batch = 512; p.n_ubatch = 512\n"
        f"p.n_seq_max = {slots}; p.kv_unified = {unified}\n"
        "I.LlamaContext(model=llm._model, params=p, verbose=True).close()\n"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stderr
    out = {"kv": 0.0, "output": 0.0, "compute": 0.0}
    for m in _REPORT.finditer(err):
        key = "kv" if m.group(1) else "output" if m.group(2) else "compute"
        out[key] = float(m.group(1) or m.group(2) or m.group(3))
    assert out["kv"] > 0, err[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("unified", [False, True])
def test_planner_memory_for_four_slots_matches_llama_cpp(smollm2_gguf, unified):
    from app.core.models.gguf import read_gguf_header
    from app.core.models.memory import LoadOptions, MiB, estimate_memory
    from app.core.models.spec import spec_from_gguf

    spec = spec_from_gguf(read_gguf_header(smollm2_gguf))
    cpu = estimate_memory(spec, LoadOptions(n_ctx=2048, n_seq=4, kv_unified=unified)).devices[0]
    real = reported_slot_context(smollm2_gguf, 2048, 4, unified)
    assert cpu.kv == pytest.approx(real["kv"] * MiB, rel=0.01)  # 180 MiB per slot split, 45 shared
    assert cpu.compute == pytest.approx(real["compute"] * MiB, rel=0.02)
    assert cpu.output == pytest.approx(real["output"] * MiB, rel=0.05)
    one = estimate_memory(spec, LoadOptions(n_ctx=2048)).devices[0]
    assert cpu.kv == (one.kv if unified else 4 * one.kv)


def test_tiny_a_long_prompt_is_read_one_chunk_a_step_and_a_cancel_stops_it_within_one(tiny_pair):
    _, batched = tiny_pair
    seqs = batched.sequences
    cancel = threading.Event()
    long_prompt = " ".join(f"w{i}" for i in range(80))
    key = seqs.admit(greedy(long_prompt, max_tokens=4), cancel)
    assert key.stats.prompt_tokens > 3 * 64
    assert seqs.step() == []  # one chunk read, no token yet
    assert key.stats.prompt_tokens_evaluated == 64
    cancel.set()
    ((got, final),) = seqs.step()
    assert got is key and final.finish_reason == "cancelled"
    assert final.stats.prompt_tokens_evaluated == 64 and seqs.active() == 0


@pytest.mark.parametrize("unified", [False, True])
def test_tiny_a_prefix_another_slot_holds_is_copied_not_read_again(tiny_gguf_f16, unified):
    engine = load_llamacpp(tiny_gguf_f16, n_ctx=512, slots=2, n_batch=64, kv_unified=unified)
    single = load_llamacpp(tiny_gguf_f16, n_ctx=512)
    try:
        document = " ".join(f"line {i}." for i in range(20))  # a long shared prefix, then different questions
        run_together(engine, [greedy(document + " First question about it", max_tokens=12)])
        other = greedy(document + " A second and different question", max_tokens=8)
        (tokens, second), *_ = run_together(engine, [other])
        shared = second.stats.prompt_tokens - second.stats.prompt_tokens_evaluated
        assert shared >= 40  # the document's tokens came from the first slot
        runner = engine.sequences.runner
        assert all(len(s.tokens) > 40 for s in runner.slots)  # and the first conversation kept its slot
        assert tokens == alone(single, other)[0]
    finally:
        engine.unload()
        single.unload()
