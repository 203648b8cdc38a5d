"""OneStream: the one-slot runner that takes every engine without batching through the host's one loop."""

from __future__ import annotations

import threading

import pytest

from app.core.engines.base import Chunk, GenerateRequest
from app.core.engines.decoding.sequences import OneStream, runner_of


def _request() -> GenerateRequest:
    return GenerateRequest(prompt="x")


def test_one_slot_busy_from_admit_to_the_last_chunk():
    runner = OneStream(lambda request, cancel: iter([Chunk(text="a"), Chunk(text="b", finish_reason="stop")]))
    assert runner.can_admit(_request()) and runner.free_slots() == 1
    key = runner.admit(_request(), threading.Event())
    assert not runner.can_admit(_request()) and runner.active() == 1
    assert runner.step() == [(key, Chunk(text="a"))]
    assert runner.step() == [(key, Chunk(text="b", finish_reason="stop"))]
    assert runner.can_admit(_request()) and not runner.shared(key)


def test_an_engine_that_stops_without_a_last_chunk_gets_one_that_says_why():
    cancel = threading.Event()
    runner = OneStream(lambda request, c: iter([Chunk(text="a")]))
    key = runner.admit(_request(), cancel)
    runner.step()
    assert runner.step() == [(key, Chunk(finish_reason="stop"))]
    key = runner.admit(_request(), cancel)
    cancel.set()
    runner.step()
    assert runner.step() == [(key, Chunk(finish_reason="cancelled"))]


def test_a_failing_step_frees_the_slot_and_closes_the_generator():
    closed = []

    def generate(request, cancel):
        try:
            yield Chunk(text="a")
            raise RuntimeError("native failure")
        finally:
            closed.append(True)

    runner = OneStream(generate)
    runner.admit(_request(), threading.Event())
    runner.step()
    with pytest.raises(RuntimeError):
        runner.step()
    assert closed == [True] and runner.can_admit(_request())


def test_a_batched_engine_keeps_its_own_runner():
    class Batched:
        sequences = object()

        def generate(self, request, cancel):
            raise AssertionError("not called")

    assert runner_of(Batched()) is Batched.sequences
    plain = type("Plain", (), {"sequences": None, "generate": lambda self, r, c: iter(())})  # declares no batched path
    assert isinstance(runner_of(plain()), OneStream)
