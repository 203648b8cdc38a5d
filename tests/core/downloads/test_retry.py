"""RetryPolicy: backoff delays, jitter, Retry-After, exhaustion, and progress resetting the count."""

from __future__ import annotations

import random

import pytest

from app.core.downloads.retry import RetryPolicy
from app.core.downloads.spec import DownloadOptions


def test_backoff_doubles_up_to_the_cap_without_jitter():
    policy = RetryPolicy(backoff_s=1.0, backoff_max_s=10.0, jitter=0)
    assert [policy.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_jitter_scales_each_delay_into_its_band():
    policy = RetryPolicy(backoff_s=2.0, backoff_max_s=60.0, jitter=0.5)
    rng = random.Random(7)
    delays = [policy.delay(3, uniform=rng.uniform) for _ in range(500)]
    assert all(4.0 <= d <= 8.0 for d in delays)
    assert max(delays) - min(delays) > 3.0  # really spread, not a constant
    assert policy.delay(3, uniform=lambda lo, hi: lo) == 4.0 and policy.delay(3, uniform=lambda lo, hi: hi) == 8.0


def test_retry_after_overrides_the_backoff_and_is_capped():
    policy = RetryPolicy(backoff_s=5.0, jitter=0, max_retry_after_s=600.0)
    assert policy.delay(1, retry_after=0) == 0.0
    assert policy.delay(4, retry_after=1.5) == 1.5
    assert policy.delay(1, retry_after=86400) == 600.0
    assert policy.delay(1, retry_after=-3) == 0.0


def test_budget_is_exhausted_after_max_retries_failures_in_a_row():
    budget = RetryPolicy(max_retries=3, backoff_s=1.0, jitter=0).attempts()
    assert [budget.failed(progressed=False) for _ in range(3)] == [1.0, 2.0, 4.0]
    assert budget.failed(progressed=False) is None and budget.failures == 4


def test_zero_retries_gives_up_at_the_first_failure():
    assert RetryPolicy(max_retries=0).attempts().failed(progressed=False) is None


def test_progress_resets_the_failure_count():
    budget = RetryPolicy(max_retries=2, backoff_s=1.0, jitter=0).attempts()
    assert budget.failed(progressed=False) == 1.0
    assert budget.failed(progressed=False) == 2.0
    # The attempt that moved forward is the first failure of a new run, so it is not the last straw.
    assert budget.failed(progressed=True) == 1.0 and budget.failures == 1
    assert budget.failed(progressed=False) == 2.0
    assert budget.failed(progressed=False) is None


def test_budget_passes_retry_after_through():
    budget = RetryPolicy(max_retries=1, backoff_s=30.0).attempts()
    assert budget.failed(progressed=False, retry_after=0.25) == 0.25


def test_download_options_from_flat_keys():
    options = DownloadOptions.of({"backoff_s": 0.01, "backoff_max_s": 0.05, "stall_timeout_s": 5.0, "max_retries": 2})
    assert options == DownloadOptions(RetryPolicy(max_retries=2, backoff_s=0.01, backoff_max_s=0.05), 5.0)
    assert DownloadOptions.of(None) == DownloadOptions() and DownloadOptions.of(options) is options
    with pytest.raises(TypeError):
        DownloadOptions.of({"retries": 3})
