"""Speculative decoding on the batched llama.cpp path: drafts (n-gram lookup or a draft model) change how
many tokens a step yields, never which tokens come out.

Equality at temperature 0 is checked with flash attention on and within the first 256 positions: there the
CPU backend computes a position's logits the same whether it is decoded alone or beside drafts. (Past 256
cells llama.cpp's single-token attention splits the KV cache differently, and without flash attention the
batched attention rounds differently: logits move by ~0.5, so a near-tie may flip. The sampled
distribution is preserved regardless; see speculative.py.)
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from pydantic import ValidationError

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.decoding.draft_cost import (
    MIN_SLOPE,
    PRIOR_SLOPE,
    PROBE_EVERY,
    PROBE_TOKENS,
    AcceptanceModel,
    StepCost,
    best_length,
)
from app.core.engines.decoding.speculative import NgramDrafter, NgramIndex, Speculator
from app.core.engines.errors import EngineError
from tests.core.engines.fixtures import chat_request, load_llamacpp
from tests.core.engines.llamacpp.test_llamacpp_batch import run_together

CODE = "def f1(x):\n    return x + 1\n\n\ndef f2(x):\n    return x + 2\n\n\ndef f3(x):\n    return x + 3\n\n\ndef f4("
PROSE = "Once upon a time, in a small village by the sea, there lived"
LIST = chat_request("Write the numbers from 1 to 30, separated by commas.", max_tokens=90)


def greedy(prompt: str, **sampling) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, sampling=SamplingParams(temperature=0.0, **sampling))


def chunks_of(engine, request):
    return list(engine.generate(request, threading.Event()))


def tokens_of(chunks):
    return [c.token for c in chunks if c.token is not None]


# -- pure ------------------------------------------------------------------------------------


def test_the_ngram_index_proposes_what_followed_the_latest_earlier_occurrence_of_the_longest_suffix():
    index = NgramIndex(n_max=3, n_min=1)
    index.extend([1, 2, 3, 4, 9, 2, 3, 5, 7])
    assert index.propose(4) == []  # 7 never occurred before
    index.extend([2, 3])
    assert index.propose(2) == [5, 7]  # "2 3" last occurred before 5 (not before 4)
    index.extend([4])
    assert index.propose(3) == [9, 2, 3]  # "2 3 4" (the longest match) came before 9
    assert index.propose(0) == []
    index.extend([8])
    assert index.propose(3) == []


def test_a_lookup_reports_how_long_its_match_is_beyond_the_longest_ngram_indexed():
    index = NgramIndex(n_max=3, n_min=1)
    index.extend([5, 6, 1, 2, 3, 4, 9, 7, 6, 1, 2, 3])
    assert index.lookup(2) == ([4, 9], 4)  # "6 1 2 3" matches: one token more than the 3-grams indexed
    index.extend([8, 2, 3])
    assert index.lookup(3) == ([8, 2, 3], 2)  # "2 3" last came before 8 (in "3 8 2 3" itself), after "1"


def test_the_step_cost_is_fitted_from_steps_of_different_sizes_and_assumed_before():
    cost = StepCost()
    assert cost.line() is None
    for _ in range(5):
        cost.record(1, 0.010)
    base, per_token = cost.line()
    assert base == pytest.approx(0.010) and per_token == pytest.approx(PRIOR_SLOPE * 0.010)  # the prior
    for n, seconds in [(9, 0.030), (5, 0.020), (9, 0.030), (3, 0.015)]:  # a CPU: 2.5 ms a token more
        cost.record(n, seconds)
    base, per_token = cost.line()
    assert base == pytest.approx(0.010, rel=0.05) and per_token == pytest.approx(0.0025, rel=0.05)
    gpu = StepCost()
    for n in (1, 17, 1, 9):
        gpu.record(n, 0.010)  # bound by reading the weights: a step costs the same whatever its size
    assert gpu.line() == pytest.approx((0.010, MIN_SLOPE * 0.010))


def test_a_draft_is_as_long_as_it_earns_where_drafts_cost_much_and_where_they_cost_little():
    cpu = (1.0, 1.0, 0.4)  # tokens and seconds of the step without the draft, seconds per draft token
    assert best_length(0.3, 16, *cpu) == 0  # prose: a draft costs more than it is expected to yield
    assert 3 <= best_length(0.9, 16, *cpu) <= 8  # code handed back: a medium draft
    assert best_length(0.99, 16, *cpu) == 16
    gpu = (1.0, 1.0, 0.005)
    assert best_length(0.3, 16, *gpu) >= 1 and best_length(0.9, 16, *gpu) == 16
    assert best_length(0.9, 3, *gpu) == 3  # never past what the lookup found
    busy = (4.0, 2.2, 0.4)  # three other sequences already in the step: their tokens wait for the draft too
    assert best_length(0.9, 16, *busy) < best_length(0.9, 16, *cpu)


def test_the_kept_share_is_learned_per_match_length_and_probed_after_it_stops_paying():
    model = AcceptanceModel()
    assert model.kept(2) < model.kept(8) < model.kept(30)  # before any draft: a longer match, likelier kept
    for _ in range(20):
        model.record(24, 8, 8)  # long matches: every draft kept
        model.record(3, 4, 0)  # short ones: none
    assert model.kept(24) > 0.97 and model.kept(3) < 0.1
    assert model.kept(2) == AcceptanceModel().kept(2)  # another length keeps its own estimate
    probes = [model.probe(3, 5) for _ in range(2 * PROBE_EVERY)]
    assert probes.count(0) == 2 * PROBE_EVERY - 2 and max(probes) == PROBE_TOKENS


def test_auto_may_draft_as_far_as_llama_servers_ngram_mod_and_fixed_drafts_stay_short(tmp_path):
    from app.core.engines.base import AUTO_DRAFT_MAX, FIXED_DRAFT_MAX
    from app.core.engines.decoding.speculative import make_speculator

    model = tmp_path / "m.gguf"
    auto = LoadSpec(path=model, speculative="auto")
    assert auto.drafts_at_most() == AUTO_DRAFT_MAX == 64
    assert LoadSpec(path=model, speculative="ngram").drafts_at_most() == FIXED_DRAFT_MAX == 16
    assert LoadSpec(path=model, speculative="auto", draft_model=model).drafts_at_most() == 16  # a draft model
    assert LoadSpec(path=model, speculative="auto", draft_max=8).drafts_at_most() == 8  # asked for
    spec = make_speculator("auto", auto.drafts_at_most())
    assert spec is not None
    state = spec.start(0, list(range(100)) * 2)  # what follows each token is certain
    spec.record(1, 0.010)
    spec.record(9, 0.0101)  # a step costs the same whatever its size (a GPU reading the weights)
    assert spec.plan([(state, 500)], 512) == 64 and state.draft == list(range(64))


def test_a_draft_mode_without_a_draft_model_is_refused(tmp_path):
    with pytest.raises(ValidationError, match="draft_model"):
        LoadSpec(path=tmp_path / "m.gguf", speculative="draft")
    with pytest.raises(ValidationError):
        LoadSpec(path=tmp_path / "m.gguf", speculative="medusa")


# -- SmolLM2 ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    """SmolLM2 without drafts, with n-gram drafts, and drafting for itself from a second copy."""
    common = {"n_ctx": 512, "slots": 4, "flash_attn": True}
    engines = {
        "off": load_llamacpp(smollm2_gguf, speculative="off", **common),
        "ngram": load_llamacpp(smollm2_gguf, speculative="ngram", draft_max=6, **common),
        "auto": load_llamacpp(smollm2_gguf, speculative="auto", **common),
        "draft": load_llamacpp(smollm2_gguf, speculative="draft", draft_model=smollm2_gguf, draft_max=4, **common),
    }
    for engine in engines.values():  # the first generation in a process is slow
        chunks_of(engine, greedy("Hello", max_tokens=2))
    yield engines
    for engine in engines.values():
        engine.unload()


@pytest.mark.parametrize("mode", ["ngram", "auto", "draft"])
def test_smollm2_drafted_greedy_output_is_plain_decoding_token_for_token(smol, mode):
    requests = [greedy(CODE, max_tokens=100), greedy(PROSE, max_tokens=60), LIST]
    accepted = []
    for request in requests:
        want = chunks_of(smol["off"], request)
        got = chunks_of(smol[mode], request)
        assert tokens_of(got) == tokens_of(want)
        assert "".join(c.text for c in got) == "".join(c.text for c in want)
        assert got[-1].finish_reason == want[-1].finish_reason
        stats = got[-1].stats
        assert stats.draft_accepted <= stats.draft_tokens
        accepted.append(stats.draft_accepted)
    assert want[-1].stats.draft_tokens == 0  # "off" drafts nothing
    if mode != "auto":  # (auto drafts only where it measures faster: on a 2-core CPU, rarely)
        assert accepted[0] > 10  # the repetitive code: many drafts kept
    if mode == "draft":
        assert all(a > 10 for a in accepted)  # a model drafting for itself is right nearly always


@pytest.mark.parametrize("mode", ["off", "ngram"])
def test_smollm2_greedy_takes_the_first_largest_logit_which_is_the_greedy_samplers_token(smol, mode, monkeypatch):
    """Plain temperature 0 skips llama.cpp's sampler chain for the argmax of the logits row; beside drafts
    that row moves along the batch (one per drafted position)."""
    from app.core.engines.llamacpp import batch as llamacpp_batch

    lib = smol[mode].sequences.runner._lib
    real, calls = lib.llama_sampler_sample, []
    monkeypatch.setattr(lib, "llama_sampler_sample", lambda *a: calls.append(1) or real(*a))
    requests = [greedy(CODE, max_tokens=60), greedy(PROSE, max_tokens=40), LIST]
    fast = [chunks_of(smol[mode], r) for r in requests]
    assert not calls
    if mode == "ngram":
        assert fast[0][-1].stats.draft_accepted > 10
    monkeypatch.setattr(llamacpp_batch, "plain_greedy", lambda sampling, grammar: False)
    chain = [chunks_of(smol[mode], r) for r in requests]
    assert len(calls) >= sum(len(tokens_of(c)) for c in chain)
    assert [tokens_of(c) for c in fast] == [tokens_of(c) for c in chain]


@pytest.mark.parametrize(
    ("change", "plain"),
    [
        ({}, True),
        ({"temperature": 0.7}, False),
        ({"repeat_penalty": 1.1}, False),
        ({"frequency_penalty": 0.5}, False),
        ({"presence_penalty": -0.5}, False),
        ({"logit_bias": {5: -100.0}}, False),
        ({"logprobs": 3, "top_k": 1, "stop": ["x"]}, True),  # these read the logits or the text, not the pick
    ],
)
def test_only_temperature_0_with_nothing_else_on_the_logits_is_plain_greedy(change, plain):
    from app.core.engines.llamacpp.options import plain_greedy

    sampling = SamplingParams(**{"temperature": 0.0, **change})
    assert plain_greedy(sampling, None) is plain
    assert plain_greedy(sampling, object()) is False  # a grammar masks the logits first


def test_smollm2_drafts_make_fewer_steps_than_tokens(smol):
    seqs = smol["ngram"].sequences
    key = seqs.admit(greedy(CODE, max_tokens=80), threading.Event())
    steps = tokens = 0
    while seqs.active():
        steps += 1
        tokens += sum(1 for k, c in seqs.step() if k is key and c.token is not None)
    assert tokens == 80 and steps < 60  # several tokens per step (the first step reads the prompt)


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_smollm2_max_tokens_stop_strings_and_logprobs_end_exactly_as_without_drafts(smol, mode):
    plain = chunks_of(smol["off"], greedy(CODE, max_tokens=100))
    text = "".join(c.text for c in plain)
    stop = "x + 4"  # the model continues the pattern: this comes after several drafted tokens
    assert stop in text
    requests = [
        *(greedy(CODE, max_tokens=n) for n in (7, 13, 29)),  # ends inside a draft
        greedy(CODE, max_tokens=100, stop=[stop]),
        greedy(CODE, max_tokens=30, logprobs=2),
    ]
    for request in requests:
        want = chunks_of(smol["off"], request)
        got = chunks_of(smol[mode], request)
        assert [(c.text, c.token) for c in got] == [(c.text, c.token) for c in want]
        assert (got[-1].finish_reason, got[-1].stop_sequence) == (want[-1].finish_reason, want[-1].stop_sequence)
        assert got[-1].stats.generated_tokens == want[-1].stats.generated_tokens
        assert [c.logprobs for c in got] == [c.logprobs for c in want]
    assert got[-1].stats.draft_accepted > 0


def test_smollm2_a_cancel_ends_a_drafting_sequence(smol):
    cancel = threading.Event()
    seen = []
    for chunk in smol["ngram"].generate(greedy(CODE, max_tokens=200), cancel):
        seen.append(chunk)
        if len(seen) == 5:
            cancel.set()
    assert seen[-1].finish_reason == "cancelled" and len(tokens_of(seen)) < 20
    again = chunks_of(smol["ngram"], greedy(CODE, max_tokens=40))  # the slot is consistent afterwards
    assert tokens_of(again) == tokens_of(chunks_of(smol["off"], greedy(CODE, max_tokens=40)))


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_smollm2_four_drafting_sequences_together_give_each_one_alone(smol, mode):
    requests = [
        greedy(CODE, max_tokens=60),
        greedy(PROSE, max_tokens=40),
        LIST,
        greedy("1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=50),
    ]
    expected = [tokens_of(chunks_of(smol["off"], r)) for r in requests]
    got = run_together(smol[mode], requests)
    assert [t for t, _ in got] == expected
    assert sum(final.stats.draft_accepted for _, final in got) > 20


def test_a_draft_model_with_another_vocabulary_is_refused_clearly(smollm2_gguf, tiny_gguf_f16):
    with pytest.raises(EngineError, match="vocabulary of 320 tokens"):
        load_llamacpp(smollm2_gguf, n_ctx=256, slots=2, speculative="draft", draft_model=tiny_gguf_f16)


# -- tiny model, temperature 1 ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sampled(tiny_pair_std02):
    # F32 weights with std 0.2: peaked enough that its own greedy drafts are often what is sampled (a random
    # model never repeats a prompt's n-grams, so the drafts come from the model drafting for itself).
    path, _ = tiny_pair_std02
    common = {"n_ctx": 256, "slots": 4, "n_batch": 64, "flash_attn": True}
    off = load_llamacpp(path, speculative="off", **common)
    ngram = load_llamacpp(path, speculative="draft", draft_model=path, draft_max=3, **common)
    yield off, ngram
    ngram.unload()
    off.unload()


def sampled(seed: int) -> GenerateRequest:
    # top_k 3 keeps a few likely tokens: a draft is right often, and often not.
    return GenerateRequest(
        prompt="a b c d e",
        sampling=SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0, seed=seed, max_tokens=4),
    )


def test_tiny_at_temperature_1_drafting_keeps_the_sampled_distribution_and_each_seeds_output(tiny_sampled):
    off, ngram = tiny_sampled
    n = 320
    plain = []
    for start in range(0, n, 4):
        plain += [t for t, _ in run_together(off, [sampled(s) for s in range(start, start + 4)])]
    same, drafted, accepted = [], [], 0
    for start in range(0, n, 4):
        same_seeds = run_together(ngram, [sampled(s) for s in range(start, start + 4)])
        other_seeds = run_together(ngram, [sampled(s) for s in range(n + start, n + start + 4)])
        same += [t for t, _ in same_seeds]
        drafted += [t for t, _ in other_seeds]
        accepted += sum(f.stats.draft_accepted for _, f in same_seeds + other_seeds)
    assert same == plain  # a seed's sample is the same with drafts
    assert accepted > n // 4  # and drafts were really kept, not all rejected
    # Other seeds: the first two tokens' distributions agree within sampling noise (~0.07 total variation
    # expected for these few tokens and samples).
    for position in range(2):
        p = Counter(t[position] for t in plain if len(t) > position)
        q = Counter(t[position] for t in drafted if len(t) > position)
        sp, sq = sum(p.values()), sum(q.values())
        tv = 0.5 * sum(abs(p[k] / sp - q[k] / sq) for k in set(p) | set(q))
        assert tv < 0.15, (position, tv, p, q)


def test_auto_drafts_for_a_sequence_decoding_alone_and_not_beside_others():
    spec = Speculator(NgramDrafter(), 16, adaptive=True)
    text = list(range(40)) * 3  # what follows each token is certain
    one, two = spec.start(0, text), spec.start(1, text)
    spec.record(1, 0.010)
    spec.record(4, 0.013)  # drafts are cheap here: alone, a long draft pays
    assert spec.plan([(one, 16)], 64) > 0 and one.draft == list(range(16))
    # With another sequence in the step, none drafts (measured: 4 CPU streams lost 38 % of their speed).
    assert spec.plan([(one, 16), (two, 16)], 64) == 0 and one.draft == two.draft == []
