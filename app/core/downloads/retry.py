"""When to try a failed request again, and how long to wait first: exponential backoff with jitter, the
server's Retry-After when it sent one, and a failure count that progress resets."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


class Retry(Exception):
    """A failed attempt worth retrying; `retry_after` overrides the backoff when the server asked for a delay."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` failures in a row are allowed; the next one gives up.

    The n-th failure in a row waits `backoff_s * 2**(n-1)` capped at `backoff_max_s`, times a random factor in
    [1 - jitter, 1] so many clients that failed together do not come back together. A server's Retry-After is
    obeyed as is, up to `max_retry_after_s`.
    """

    max_retries: int = 8
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    jitter: float = 0.5
    max_retry_after_s: float = 600.0

    def delay(
        self, failures: int, retry_after: float | None = None, uniform: Callable[[float, float], float] = random.uniform
    ) -> float:
        """Seconds to wait after the `failures`-th failure in a row (1 for the first)."""
        if retry_after is not None:
            return min(max(0.0, retry_after), self.max_retry_after_s)
        backoff = min(self.backoff_max_s, self.backoff_s * 2 ** (max(1, failures) - 1))
        return backoff * uniform(1.0 - self.jitter, 1.0) if self.jitter else backoff

    def attempts(self) -> RetryBudget:
        """A fresh failure count for one download run."""
        return RetryBudget(self)


class RetryBudget:
    """The failures in a row of one run under a `RetryPolicy`."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures = 0

    def failed(self, progressed: bool, retry_after: float | None = None) -> float | None:
        """Count a failure; the delay before the next attempt, or None once the retries are used up.

        An attempt that moved the download forward counts as the first failure of a new run: a flaky
        connection that keeps delivering is not given up on.
        """
        self.failures = 1 if progressed else self.failures + 1
        if self.failures > self.policy.max_retries:
            return None
        return self.policy.delay(self.failures, retry_after)
