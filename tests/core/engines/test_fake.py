"""FakeEngine and the stop-string scanner it shares with the MLX engine."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.core.engines import collect
from app.core.engines.base import EngineError, GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.fake import FakeEngine, registry_with_fake
from app.core.engines.stops import StopScanner


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
