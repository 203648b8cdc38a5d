"""Speculative decoding for the batched llama.cpp engine: drafts proposed per sequence, checked in the step's batch.

A decoding sequence puts its next token and up to k drafted tokens into the step's batch, with logits at
each. The runner then samples with the sequence's own chain at each position in turn and goes on only
while the sampled token equals the draft there. Every emitted token is drawn from the model's own
distribution given the tokens before it (speculative sampling with a point-mass draft is exact), and the
chain sees exactly the tokens, and draws exactly the random numbers, it would without drafts: for a given
seed the output is the one plain decoding gives, at any temperature. Drafts only change how many tokens
one step yields.

Drafts come from prompt lookup (the tokens that followed the latest earlier occurrence of the sequence's
last few tokens, in its prompt and reply) or from a draft model (llamacpp_draft.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

logger = logging.getLogger(__name__)

# Longest and shortest n-gram looked up: a longer match predicts better, a 1-gram still often does in code.
NGRAM_MAX = 12
NGRAM_MIN = 2
# "auto" drafts only after a match this long: a verbatim stretch (code handed back, a quote) goes on for a
# while, a short match is often a coincidence whose verification costs more than it saves.
AUTO_MIN_MATCH = 8
# "auto": after this many rounds in a row without one accepted draft, a sequence stops drafting for PAUSE
# steps (then tries again), so prose that never repeats pays for no wasted verification.
MISSES_BEFORE_PAUSE = 3
PAUSE = 16


class NgramIndex:
    """A sequence's tokens, and where each of their n-grams last occurred, updated as tokens come (a
    lookup costs NGRAM_MAX dictionary reads, never a rescan)."""

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> None:
        self.n_max = n_max
        self.n_min = n_min
        self.tokens: list[int] = []
        # n-gram -> the position right after its latest occurrence whose next token is known
        self._after: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: list[int]) -> None:
        seq, after = self.tokens, self._after
        for token in tokens:
            i = len(seq)
            for n in range(self.n_min, min(self.n_max, i) + 1):
                after[tuple(seq[i - n : i])] = i  # this n-gram is followed by `token`, at i
            seq.append(token)

    def propose(self, k: int, n_min: int = 0) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest matching suffix (of at
        least `n_min` tokens, the index's own minimum by default)."""
        seq = self.tokens
        if k <= 0:
            return []
        end = len(seq)
        for n in range(min(self.n_max, end), max(self.n_min, n_min) - 1, -1):
            at = self._after.get(tuple(seq[end - n :]))
            if at is not None:
                return seq[at : at + k]
        return []


@dataclass
class DraftPolicy:
    """How many tokens a sequence drafts next: fixed, or ("auto") shrunk after misses, grown after hits,
    and paused after repeated rounds with nothing accepted."""

    limit: int
    adaptive: bool
    k: int = 0
    misses: int = 0
    paused: int = 0

    def __post_init__(self) -> None:
        self.k = self.limit

    def length(self) -> int:
        if self.paused > 0:
            self.paused -= 1
            return 0
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        if not self.adaptive or drafted == 0:
            return
        if accepted == 0:
            self.k = max(1, self.k // 2)
            self.misses += 1
            if self.misses >= MISSES_BEFORE_PAUSE:
                self.paused, self.misses = PAUSE, 0
            return
        self.misses = 0
        self.k = min(self.limit, self.k * 2) if accepted == drafted else max(1, accepted + 1)


@dataclass(eq=False)
class SeqDrafts:
    """One sequence's drafting state: its history (prompt and reply) and its policy."""

    seq_id: int
    index: NgramIndex
    policy: DraftPolicy
    draft: list[int] = field(default_factory=list)  # this step's drafted tokens, in the batch after the next token


class Drafter(Protocol):
    """Proposes drafts for several sequences at once: (state, tokens wanted) in, tokens per sequence out."""

    def propose(self, wanted: list[tuple[SeqDrafts, int]]) -> list[list[int]]: ...

    def close(self) -> None: ...


class NgramDrafter:
    def __init__(self, n_min: int = NGRAM_MIN) -> None:
        self.n_min = n_min

    def propose(self, wanted: list[tuple[SeqDrafts, int]]) -> list[list[int]]:
        return [state.index.propose(k, self.n_min) for state, k in wanted]

    def close(self) -> None:
        pass


class CostGate:
    """ "auto": whether drafting pays on this machine. Verifying k drafts costs about k tokens' compute where
    decoding is compute-bound (a small model on a few CPU cores) and little where it is bound by memory
    bandwidth (a GPU, a large model): so the seconds per emitted token of decoding steps with drafts and
    without are both measured as they run, the cheaper is used, and the other tried now and then."""

    def __init__(self) -> None:
        self.plain: float | None = None  # moving averages, seconds per emitted token
        self.drafted: float | None = None
        self.steps = 0

    def want(self) -> bool:
        self.steps += 1
        if self.plain is None or self.drafted is None:
            return self.plain is not None  # one plain measurement first, then one with drafts
        better = self.drafted < self.plain
        return not better if self.steps % PROBE_EVERY == 0 else better

    def record(self, drafted: bool, seconds: float, tokens: int) -> None:
        if tokens <= 0:
            return
        per = seconds / tokens
        if drafted:
            self.drafted = per if self.drafted is None else self.drafted + COST_EMA * (per - self.drafted)
        else:
            self.plain = per if self.plain is None else self.plain + COST_EMA * (per - self.plain)


# CostGate: a step in this many tries the choice not taken (the measurements stay fresh), and the weight
# of a new measurement in the moving averages.
PROBE_EVERY = 16
COST_EMA = 0.2


class Speculator:
    """The runner's drafting: a sequence's state at admission, and each step's drafts within a budget."""

    def __init__(self, drafter: Drafter, draft_max: int, adaptive: bool) -> None:
        self.drafter = drafter
        self.draft_max = draft_max
        self.adaptive = adaptive
        self.gate = CostGate() if adaptive else None

    def want(self) -> bool:
        """Whether this step drafts at all ("auto" asks its CostGate)."""
        return self.gate is None or self.gate.want()

    def record(self, drafted: bool, seconds: float, tokens: int) -> None:
        """A decoding step's time and emitted tokens (no prompt read in it)."""
        if self.gate is not None:
            self.gate.record(drafted, seconds, tokens)

    def start(self, seq_id: int, tokens: list[int]) -> SeqDrafts:
        index = NgramIndex()
        index.extend(tokens)
        return SeqDrafts(seq_id, index, DraftPolicy(self.draft_max, self.adaptive))

    def plan(self, wanted: list[tuple[SeqDrafts, int]], budget: int) -> int:
        """Set each state's `draft` (at most its own cap, and `budget` tokens in all, oldest first);
        returns the tokens drafted."""
        asked: list[tuple[SeqDrafts, int]] = []
        for state, cap in wanted:
            state.draft = []
            k = min(state.policy.length(), cap, budget)
            if k > 0:
                asked.append((state, k))
                budget -= k
        if not asked:
            return 0
        try:
            drafts = self.drafter.propose(asked)
        except Exception:  # a failing draft model costs speed, never a reply
            logger.exception("drafting failed; this step decodes without drafts")
            return 0
        total = 0
        for (state, k), draft in zip(asked, drafts):
            state.draft = list(draft[:k])
            total += len(state.draft)
        return total

    def close(self) -> None:
        self.drafter.close()


def make_speculator(mode: str, draft_max: int, model_drafter: Any = None) -> Speculator | None:
    """The Speculator a load asks for (`LoadSpec.speculative`), None for "off"."""
    if mode == "off":
        return None
    if model_drafter is not None:
        return Speculator(model_drafter, draft_max, adaptive=False)
    if mode == "auto":
        return Speculator(NgramDrafter(AUTO_MIN_MATCH), draft_max, adaptive=True)
    return Speculator(NgramDrafter(), draft_max, adaptive=False)
