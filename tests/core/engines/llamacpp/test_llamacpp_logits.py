"""LogitRows: numpy views of a context's logits rows, kept by address, and the greedy pick."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from app.core.engines.errors import EngineError
from app.core.engines.llamacpp.logits import LogitRows

N_VOCAB = 5


class FakeLib:
    """llama_get_logits_ith over a buffer of rows that a test may reallocate, as llama.cpp does."""

    def __init__(self, rows: list[list[float]]) -> None:
        self.fill(rows)

    def fill(self, rows: list[list[float]]) -> None:
        self.buffer = (ctypes.c_float * (N_VOCAB * len(rows)))(*[x for r in rows for x in r])

    def llama_get_logits_ith(self, ctx, at):
        if at >= len(self.buffer) // N_VOCAB:
            return ctypes.POINTER(ctypes.c_float)()  # NULL: no logits kept there
        return ctypes.cast(ctypes.byref(self.buffer, at * N_VOCAB * 4), ctypes.POINTER(ctypes.c_float))


def test_rows_read_llama_cpps_buffer_and_the_pick_is_the_first_largest():
    lib = FakeLib([[0.0, 3.0, 1.0, 3.0, -1.0], [2.0, 0.0, 0.0, 0.0, 2.5]])
    rows = LogitRows(lib, None, N_VOCAB, keep=8)
    assert rows.argmax(0) == 1  # a tie goes to the lower id, as llama.cpp's greedy sampler breaks it
    assert rows.argmax(1) == 4
    assert np.array_equal(rows.row(1), np.array([2.0, 0.0, 0.0, 0.0, 2.5], dtype=np.float32))
    lib.buffer[1] = -9.0  # the next decode writes the same buffer: the view sees it
    assert rows.argmax(0) == 3


def test_a_view_is_kept_per_address_within_the_bound_and_a_missing_row_is_an_error():
    lib = FakeLib([[float(i == r) for i in range(N_VOCAB)] for r in range(4)])
    rows = LogitRows(lib, None, N_VOCAB, keep=2)
    first = rows.row(0)
    assert rows.row(0) is first  # looked up, not made again
    rows.row(1)
    rows.row(2)  # past the bound: the kept views are dropped
    assert rows.row(0) is not first and rows.argmax(0) == 0
    lib.fill([[0.0, 0.0, 7.0, 0.0, 0.0]])  # a reallocated buffer at another address
    assert rows.argmax(0) == 2
    with pytest.raises(EngineError, match="no logits"):
        rows.row(3)
