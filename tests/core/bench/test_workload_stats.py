"""Workloads (validation, presets, the --prompt-lens parser) and percentiles."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.core.bench.stats import percentile, summarize
from app.core.bench.workload import PRESETS, Workload, parse_int_list, preset


def test_workload_sorts_and_dedupes_and_sizes_its_context():
    w = Workload(prompt_lens=[512, 128, 512], concurrency=[4, 1], gen_len=64)
    assert w.prompt_lens == [128, 512] and w.concurrency == [1, 4]
    assert w.cells == [(128, 1), (128, 4), (512, 1), (512, 4)]
    assert w.target_ctx >= 512 + 64 and w.target_ctx % 256 == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"prompt_lens": []},
        {"prompt_lens": [0]},
        {"concurrency": [0]},
        {"runs": 0},
        {"ctx": 256, "prompt_lens": [512]},
        {"unknown_field": 1},
    ],
)
def test_bad_workloads_are_refused(bad):
    with pytest.raises(ValidationError):
        Workload(**bad)


def test_a_context_too_small_says_what_would_do():
    with pytest.raises(ValidationError, match="--ctx 656"):
        Workload(prompt_lens=[512], gen_len=128, ctx=512)


def test_presets_are_the_four_the_page_lists_and_valid():
    assert list(PRESETS) == ["chat", "long document", "agent with a big system prompt", "4 users"]
    assert preset("Long-Document").preset == "long document"
    assert preset("agent with a big system prompt").prefix_lens == [8192]
    assert preset("4_users").concurrency == [1, 4]
    preset("chat").runs = 99  # a copy: the registry keeps its own
    assert PRESETS["chat"].runs == 3
    with pytest.raises(KeyError, match="chat, long document"):
        preset("nope")


def test_total_requests_counts_warmup_cells_and_prefix_pairs():
    w = Workload(prompt_lens=[64, 128], concurrency=[1, 3], runs=2, warmup=1, shared_prefix=100)
    assert w.total_requests() == 1 * 2 + (1 + 3) * 2 * 2 + 2 * 2 * 1  # only 128 has room for the prefix


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "comma-separated"), ("128,,512", "comma-separated"), ("128,abc", "'abc' is not"), ("0", "at least 1")],
)
def test_parse_int_list_errors_are_clear(text, message):
    with pytest.raises(ValueError, match=message):
        parse_int_list(text, "--prompt-lens")


def test_parse_int_list():
    assert parse_int_list(" 128, 512,2048") == [128, 512, 2048]


def test_percentiles_interpolate_between_ranks():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 95) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summarize_skips_missing_and_non_finite():
    s = summarize([1.0, None, float("nan"), 3.0])
    assert s is not None and s.n == 2 and s.p50 == 2.0 and s.mean == 2.0
    assert summarize([None]) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=50))
def test_percentiles_are_ordered(values):
    s = summarize(values)
    assert s is not None
    assert min(values) <= s.p50 <= s.p95 <= s.p99 <= max(values)
