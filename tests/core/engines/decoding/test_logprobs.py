"""from_logits: a log-softmax of raw logits, the sampled token and the top alternatives in order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.engines.decoding.logprobs import from_logits


def piece(i: int) -> bytes:
    return f"<{i}>".encode()


def test_log_softmax_of_the_logits():
    logits = [2.0, 1.0, 0.0, -1.0]
    lse = math.log(sum(math.exp(v) for v in logits))
    lp = from_logits(np.array(logits, dtype=np.float32), 1, b"one", 0, piece)
    assert lp.sampled.id == 1 and lp.sampled.token == b"one"
    assert lp.sampled.logprob == pytest.approx(1.0 - lse)
    assert lp.top == ()


def test_top_alternatives_most_likely_first_ties_by_id_and_the_sampled_one_as_sampled():
    logits = np.array([0.5, 3.0, 0.5, 3.0, -2.0], dtype=np.float32)
    lp = from_logits(logits, 3, b"three", 3, piece)
    assert [t.id for t in lp.top] == [1, 3, 0]
    assert lp.top[1] is lp.sampled  # the sampled token reads the same wherever it appears
    assert lp.top[0].token == b"<1>" and lp.top[0].logprob == pytest.approx(lp.sampled.logprob)
    assert sum(math.exp(t.logprob) for t in from_logits(logits, 0, b"", 5, piece).top) == pytest.approx(1.0)


def test_more_alternatives_than_the_vocabulary_gives_the_whole_vocabulary():
    lp = from_logits([1.0, 2.0], 0, b"a", 20, piece)
    assert [t.id for t in lp.top] == [1, 0]


def test_large_logits_do_not_overflow():
    lp = from_logits(np.array([1000.0, 999.0], dtype=np.float32), 0, b"a", 1, piece)
    assert lp.sampled.logprob == pytest.approx(-math.log1p(math.exp(-1.0)))
