"""Sampling under a grammar (T39): the output still follows the schema with every sampler stage, a grammar
whose check takes too long per token ends its request with a schema error instead of holding the engine,
and cancel reaches a token in the middle of its grammar check."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

from app.core.engines.base import GenerateRequest
from tests.core.engines.fixtures import chat_request

# Nested repetition over a part that can be empty: ~4 s per token on SmolLM2's vocabulary here (the
# schema bounds refuse the pattern that makes it; a GBNF grammar reaches the engine as it is).
SLOW = 'root ::= "\\"" ("a"{0,10}){0,100} "\\""'
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 5_000}, "score": {"type": "integer"}},
    "required": ["city", "score"],
}


def _run(engine, request: GenerateRequest, cancel: threading.Event | None = None):
    chunks = list(engine.generate(request, cancel or threading.Event()))
    return "".join(c.text for c in chunks), chunks[-1]


@contextmanager
def _budget(engine, seconds: float):
    runner = engine.sequences.runner
    before = runner.grammar_budget_s
    runner.grammar_budget_s = seconds
    try:
        yield
    finally:
        runner.grammar_budget_s = before


def test_constrained_output_follows_the_schema_greedy_and_sampled_with_bias_and_penalties(smollm2_engine):
    ask = "Give the city of the Eiffel Tower and a score as JSON."
    text, final = _run(smollm2_engine, chat_request(ask, max_tokens=40).model_copy(update={"json_schema": SCHEMA}))
    value = json.loads(text)
    assert isinstance(value["city"], str) and isinstance(value["score"], int), text
    assert final.finish_reason == "stop"
    sampled = chat_request(
        ask, max_tokens=40, temperature=0.9, seed=7, repeat_penalty=1.2, logit_bias={"90": -100.0}
    ).model_copy(update={"json_schema": SCHEMA})
    text, final = _run(smollm2_engine, sampled)
    assert set(json.loads(text)) == {"city", "score"}, text
    again, _ = _run(smollm2_engine, sampled)
    assert again == text  # the seed still decides the draw


def test_a_grammar_over_its_time_budget_ends_the_request_and_the_engine_answers_next(smollm2_engine):
    with _budget(smollm2_engine, 0.5):
        began = time.monotonic()
        text, final = _run(smollm2_engine, GenerateRequest(prompt="Say a", grammar=SLOW))
        took = time.monotonic() - began
    assert final.finish_reason == "error" and final.error_code == "schema_too_complex", final
    assert "0.5 s to check one token" in final.error
    assert took < 3.0, took  # the budget and one slice of the vocabulary past it, not the ~4 s token
    text, final = _run(smollm2_engine, chat_request("What is the capital of France?", max_tokens=8))
    assert "Paris" in text and final.finish_reason in ("stop", "length")


def test_cancel_stops_a_token_in_the_middle_of_its_grammar_check(smollm2_engine):
    cancel = threading.Event()
    with _budget(smollm2_engine, 60.0):
        threading.Timer(0.5, cancel.set).start()
        began = time.monotonic()
        _, final = _run(smollm2_engine, GenerateRequest(prompt="Say a", grammar=SLOW), cancel)
        took = time.monotonic() - began
    assert final.finish_reason == "cancelled", final
    assert took < 3.0, took
