"""What a prompt-lookup draft is worth on this machine: the measured cost of a step by its tokens, the kept
share of drafts by how long their n-gram match was, and the draft length that earns the most from both.

Why measured, not assumed: checking k drafts costs about k tokens' compute where decoding is compute-bound
(a small model on a few CPU cores: 8 drafts cost ~3.5x one token here) and little more than one token
where it is bound by reading the weights (a GPU, a large model). And a 30-token verbatim match (code handed
back) is kept far more often than a 2-token one (prose).
"""

from __future__ import annotations

# StepCost: the weight of a step's measurement falls by this much with each later step (recent ones count
# most: a longer context or another load on the machine changes the cost).
COST_DECAY = 0.98
# Before steps of different sizes are measured, a draft token is assumed to cost this share of a step.
PRIOR_SLOPE = 0.3
# A draft token never costs nothing, whatever a noisy fit says.
MIN_SLOPE = 0.005

# AcceptanceModel: match lengths grouped from these lower bounds; each group's prior is kept/(kept+missed)
# = m/(m+1) for its bound m, worth PRIOR_WEIGHT drafts, and older drafts weigh ACCEPT_DECAY less with each.
MATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
PRIOR_WEIGHT = 2.0
ACCEPT_DECAY = 0.95
# A group whose drafts no longer pay still drafts PROBE_TOKENS tokens once in PROBE_EVERY chances, so it
# can be found to pay again (~1 % of those steps' cost on a CPU).
PROBE_EVERY = 64
PROBE_TOKENS = 2


class StepCost:
    """Seconds per decoding step as base + per_token x (tokens in the batch - 1), fitted by least squares
    over the steps as they run, recent ones weighing most."""

    def __init__(self) -> None:
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def record(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        d, x = COST_DECAY, float(tokens - 1)
        self._w = self._w * d + 1.0
        self._x = self._x * d + x
        self._y = self._y * d + seconds
        self._xx = self._xx * d + x * x
        self._xy = self._xy * d + x * seconds

    def line(self) -> tuple[float, float] | None:
        """(base, per_token) in seconds; None before any step was measured."""
        if self._w <= 0:
            return None
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var < 0.25:  # one batch size seen so far: nothing to fit a slope to
            base = my / (1.0 + PRIOR_SLOPE * mx)
            return base, PRIOR_SLOPE * base
        slope = (self._xy / self._w - mx * my) / var
        base = max(my - slope * mx, 0.25 * my)
        return base, max(slope, MIN_SLOPE * base)


class AcceptanceModel:
    """The chance that a drafted token is kept, by the length of the match that proposed it: the kept
    share of earlier drafts' tokens (each draft ends at its first miss: kept / (kept + misses))."""

    def __init__(self) -> None:
        self._kept = [PRIOR_WEIGHT * m / (m + 1) for m in MATCH_BUCKETS]
        self._missed = [PRIOR_WEIGHT / (m + 1) for m in MATCH_BUCKETS]
        self._declined = [0] * len(MATCH_BUCKETS)

    @staticmethod
    def _group(match: int) -> int:
        return max((i for i, m in enumerate(MATCH_BUCKETS) if match >= m), default=0)

    def kept(self, match: int) -> float:
        g = self._group(match)
        return self._kept[g] / (self._kept[g] + self._missed[g])

    def record(self, match: int, drafted: int, accepted: int) -> None:
        g = self._group(match)
        self._kept[g] = self._kept[g] * ACCEPT_DECAY + accepted
        self._missed[g] = self._missed[g] * ACCEPT_DECAY + (1.0 if accepted < drafted else 0.0)

    def probe(self, match: int, available: int) -> int:
        """Tokens to draft where no length pays: now and then a few, to keep the estimate current."""
        g = self._group(match)
        self._declined[g] += 1
        if self._declined[g] % PROBE_EVERY:
            return 0
        return min(PROBE_TOKENS, available)


def best_length(p: float, cap: int, tokens: float, seconds: float, per_token: float) -> int:
    """The draft length k <= cap that maximises the step's expected tokens per second: (tokens + p + p^2 +
    ... + p^k) / (seconds + k x per_token), where `tokens` and `seconds` are what the step yields and costs
    without this draft. 0 when no draft beats none."""
    best, best_k = tokens / seconds, 0
    gain, term = 0.0, 1.0
    for k in range(1, cap + 1):
        term *= p
        gain += term
        value = (tokens + gain) / (seconds + k * per_token)
        if value > best:
            best, best_k = value, k
    return best_k
