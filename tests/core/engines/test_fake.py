"""FakeEngine and the stop-string scanner it shares with the MLX engine."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.engines import collect
from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.decoding.stops import StopScanner
from app.core.engines.errors import EngineError, InvalidRequest
from tests.fixtures.fake_engine import FakeEngine, registry_with_fake


def loaded(**kwargs) -> FakeEngine:
    e = FakeEngine(**kwargs)
    e.load(LoadSpec(path=Path("any/where.fake"), n_ctx=64))
    return e


def run(e: FakeEngine, prompt: str = "hello there", cancel: threading.Event | None = None, **sampling):
    return collect(
        e.generate(GenerateRequest(prompt=prompt, sampling=SamplingParams(**sampling)), cancel or threading.Event())
    )


def test_script_max_tokens_and_stop_strings():
    e = loaded(script="the kettle sings by the fire tonight")
    text, final = run(e)
    assert text == "the kettle sings by the fire tonight" and final.finish_reason == "stop"
    text, final = run(e, max_tokens=3)
    assert text == "the kettle sings" and final.finish_reason == "length"
    assert final.stats.generated_tokens == 3
    text, final = run(e, stop=["by the"])
    assert text == "the kettle sings " and final.finish_reason == "stop"


def test_random_words_are_deterministic_and_fill_to_context():
    a, fa = run(loaded(seed=1), "same prompt")
    b, _ = run(loaded(seed=1), "same prompt")
    c, _ = run(loaded(seed=2), "same prompt")
    assert a == b and a != c
    assert fa.finish_reason == "length" and fa.stats.generated_tokens == 64 - 2


def test_rate_and_cancel_every_token():
    e = loaded(tok_s=100)
    cancel = threading.Event()
    t0 = time.perf_counter()
    n = 0
    for chunk in e.generate(GenerateRequest(prompt="go", sampling=SamplingParams(max_tokens=50)), cancel):
        if chunk.finish_reason is None:
            n += 1
            if n == 5:
                cancel.set()
        else:
            final = chunk
    assert final.finish_reason == "cancelled" and final.stats.generated_tokens == 5
    assert 0.03 < time.perf_counter() - t0 < 1.0


def test_prefill_delay_and_cancel_between_batches():
    e = loaded(prompt_batch=4, prompt_batch_delay_s=0.05)
    cancel = threading.Event()
    threading.Timer(0.12, cancel.set).start()
    t0 = time.perf_counter()
    _, final = run(e, " ".join(["w"] * 40), cancel)
    assert time.perf_counter() - t0 < 0.3
    assert final.finish_reason == "cancelled" and 0 < final.stats.prompt_tokens_evaluated < 40


def test_prefix_reuse_counts_only_new_tokens():
    e = loaded(script="x y")
    _, f1 = run(e, "a b c d")
    assert f1.stats.prompt_tokens_evaluated == 4
    _, f2 = run(e, "a b c d x y e f")
    assert f2.stats.prompt_tokens_evaluated == 2
    _, f3 = run(e, "zzz a b")
    assert f3.stats.prompt_tokens_evaluated == 3


def test_fault_injection():
    with pytest.raises(EngineError, match="nope"):
        FakeEngine(fail_on_load="nope").load(LoadSpec(path=Path("m.fake")))
    e = loaded(raise_on_token=2)
    chunks = []
    with pytest.raises(EngineError, match="token 2"):
        for c in e.generate(GenerateRequest(prompt="p"), threading.Event()):
            chunks.append(c)
    assert len(chunks) == 2


def test_registry_with_fake_registers_only_fake():
    made: list[FakeEngine] = []
    reg = registry_with_fake(made, tok_s=5)
    assert reg.formats() == ["fake"]
    engine = reg.create("fake")
    assert made == [engine] and engine.tok_s == 5


def test_fake_is_not_in_the_default_registry():
    from app.core.engines import default_registry

    assert "fake" not in default_registry().formats()


@pytest.mark.parametrize(
    "pieces, stops, want, hit",
    [
        (["Hel", "lo <", "|end", "|> more"], ["<|end|>"], "Hello ", "<|end|>"),
        (["ab", "c"], ["abd"], "abc", None),
        (["x", "yz"], ["y", "z"], "x", "y"),
        (["no stops"], [], "no stops", None),
    ],
)
def test_stop_scanner(pieces, stops, want, hit):
    s = StopScanner(stops)
    out = "".join(s.feed(p) for p in pieces) + s.flush()
    assert out == want and s.hit == hit


# -- logprobs and logit_bias -----------------------------------------------------------------


def token_chunks(e: FakeEngine, prompt: str = "hello there", **sampling):
    request = GenerateRequest(prompt=prompt, sampling=SamplingParams(**sampling))
    return [c for c in e.generate(request, threading.Event()) if c.finish_reason is None]


def test_no_logprobs_unless_asked():
    assert all(c.logprobs is None for c in token_chunks(loaded(script="a b c")))


def test_logprobs_are_a_distribution_the_emitted_word_tops():
    chunks = token_chunks(loaded(script="the kettle sings"), logprobs=3)
    assert [c.logprobs.sampled.token for c in chunks] == [b"the", b" kettle", b" sings"]  # the text each adds
    for c in chunks:
        lp = c.logprobs
        assert lp.sampled.id == c.token and lp.sampled.logprob < 0
        assert len(lp.top) == 3 and lp.top[0] == lp.sampled  # the fake is greedy: its word is the likeliest
        assert [t.logprob for t in lp.top] == sorted((t.logprob for t in lp.top), reverse=True)
        assert sum(math.exp(t.logprob) for t in lp.top) < 1
    assert len({c.logprobs.sampled.logprob for c in chunks}) == 3  # not one constant
    again = token_chunks(loaded(script="the kettle sings"), logprobs=3)
    assert [c.logprobs for c in again] == [c.logprobs for c in chunks]  # deterministic
    assert all(c.logprobs.top == () for c in token_chunks(loaded(script="a b"), logprobs=0))


def test_logit_bias_bans_the_likeliest_word_and_the_next_takes_its_place():
    plain = token_chunks(loaded(script="the kettle sings"), logprobs=2)
    banned = plain[0].token
    chunks = token_chunks(loaded(script="the kettle sings"), logprobs=2, logit_bias={banned: -100})
    runner_up = plain[0].logprobs.top[1]
    assert chunks[0].token == runner_up.id and chunks[0].text == runner_up.text
    # Logprobs are the model's own distribution, before the bias: the same numbers as without it.
    assert chunks[0].logprobs.sampled.logprob == runner_up.logprob
    assert chunks[0].logprobs.top == plain[0].logprobs.top
    assert [c.token for c in chunks[1:]] == [c.token for c in plain[1:]]


def test_logit_bias_forces_any_token_in_the_vocabulary():
    chunks = token_chunks(loaded(script="a b c"), logit_bias={4242: 100})
    assert [c.token for c in chunks] == [4242] * 3 and "".join(c.text for c in chunks) == "tok4242 tok4242 tok4242"


def test_logit_bias_outside_the_vocabulary_fails_before_anything_runs():
    e = loaded(script="a")
    with pytest.raises(InvalidRequest, match="50000") as err:
        e.generate(GenerateRequest(prompt="hi", sampling=SamplingParams(logit_bias={50_000: 1})), threading.Event())
    assert err.value.code == "invalid_request" and err.value.details == {"param": "logit_bias"}


@pytest.mark.parametrize(
    "bad", [{"logit_bias": {1: 100.5}}, {"logit_bias": {1: -101}}, {"logprobs": 21}, {"logprobs": -1}]
)
def test_sampling_params_bound_bias_and_logprobs(bad):
    with pytest.raises(ValidationError):
        SamplingParams(**bad)
