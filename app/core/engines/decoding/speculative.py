"""Speculative decoding for the batched llama.cpp engine: drafts proposed per sequence, checked in the step's batch.

A decoding sequence puts its next token and up to k drafted tokens into the step's batch, with logits at
each. The runner then samples with the sequence's own chain at each position in turn and goes on only
while the sampled token equals the draft there. Every emitted token is drawn from the model's own
distribution given the tokens before it (speculative sampling with a point-mass draft is exact), and the
chain sees exactly the tokens, and draws exactly the random numbers, it would without drafts: for a given
seed the output is the one plain decoding gives, at any temperature. Drafts only change how many tokens
one step yields: exactly so up to llama.cpp's kernels, which give a draft's rows, checked together, other
last bits than one row decoded alone (a near-tie can flip; a deterministic load drafts nothing).

Drafts come from prompt lookup (the tokens that followed the latest earlier occurrence of the sequence's
last few tokens, in its prompt and reply) or from a draft model (llamacpp/draft.py). "auto" sizes each
prompt-lookup draft by what it is expected to earn on this machine (draft_cost.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.engines.decoding.draft_cost import AcceptanceModel, StepCost, best_length

logger = logging.getLogger(__name__)

# Longest and shortest n-gram looked up: a longer match predicts better, a 1-gram still often does in code.
NGRAM_MAX = 12
NGRAM_MIN = 2
# How far back a found match is measured (beyond NGRAM_MAX): 30 tokens verbatim predict more than 12.
MATCH_MEASURED = 32


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
        return self.lookup(k, n_min)[0]

    def lookup(self, k: int, n_min: int = 0) -> tuple[list[int], int]:
        """`propose`, and how long the match behind it is (counted up to MATCH_MEASURED tokens back)."""
        seq = self.tokens
        if k <= 0:
            return [], 0
        end = len(seq)
        for n in range(min(self.n_max, end), max(self.n_min, n_min) - 1, -1):
            at = self._after.get(tuple(seq[end - n :]))
            if at is not None:
                m = n
                while m < MATCH_MEASURED and at - m - 1 >= 0 and seq[at - m - 1] == seq[end - m - 1]:
                    m += 1
                return seq[at : at + k], m
        return [], 0


@dataclass(eq=False)
class SeqDrafts:
    """One sequence's drafting state: its history (prompt and reply) and this step's draft."""

    seq_id: int
    index: NgramIndex
    draft: list[int] = field(default_factory=list)  # this step's drafted tokens, in the batch after the next token
    match: int = 0  # the n-gram match length behind `draft` ("auto")


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


class Speculator:
    """The runner's drafting: a sequence's state at admission, and each step's drafts within a budget.

    Fixed (`adaptive=False`): every decoding sequence drafts `draft_max` tokens (fewer where its drafter
    has fewer). "auto" (`adaptive=True`, prompt lookup): each draft is cut to the length that maximises
    expected tokens per second, from the measured cost of a step by its tokens and the kept share of
    earlier drafts by match length; none where no length beats plain decoding, nor beside other decoding
    sequences."""

    def __init__(self, drafter: Drafter, draft_max: int, adaptive: bool) -> None:
        self.drafter = drafter
        self.draft_max = draft_max
        self.adaptive = adaptive
        self.cost = StepCost() if adaptive else None
        self.acceptance = AcceptanceModel() if adaptive else None

    def record(self, tokens: int, seconds: float) -> None:
        """A decoding step's batch size and time (no prompt read in it)."""
        if self.cost is not None:
            self.cost.record(tokens, seconds)

    def start(self, seq_id: int, tokens: list[int]) -> SeqDrafts:
        index = NgramIndex()
        index.extend(tokens)
        return SeqDrafts(seq_id, index)

    def plan(self, wanted: list[tuple[SeqDrafts, int]], budget: int) -> int:
        """Set each state's `draft` (at most its own cap, and `budget` tokens in all, oldest first);
        returns the tokens drafted."""
        for state, _ in wanted:
            state.draft, state.match = [], 0
        if self.adaptive:
            return self._plan_adaptive(wanted, budget)
        asked: list[tuple[SeqDrafts, int]] = []
        for state, cap in wanted:
            k = min(self.draft_max, cap, budget)
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

    def _plan_adaptive(self, wanted: list[tuple[SeqDrafts, int]], budget: int) -> int:
        assert self.cost is not None and self.acceptance is not None
        line = self.cost.line()
        if line is None:
            return 0  # a plain step is measured first
        if len(wanted) != 1:
            # Beside other sequences drafts did not pay where measured (4 streams of prose on a 2-core CPU
            # lost 38 % of their aggregate speed), so "auto" drafts only for a sequence decoding alone.
            return 0
        (state, cap), (base, per_token) = wanted[0], line
        k = min(self.draft_max, cap, budget)
        if k <= 0:
            return 0
        draft, match = state.index.lookup(k, NGRAM_MIN)
        if not draft:
            return 0
        p = self.acceptance.kept(match)
        # Without a draft the step yields one token in `base` seconds; the draft is sized against that.
        n = best_length(p, len(draft), 1.0, base, per_token) or self.acceptance.probe(match, len(draft))
        state.draft, state.match = draft[:n], match
        return n

    def checked(self, state: SeqDrafts, drafted: int, accepted: int) -> None:
        """A sequence's draft was verified: `accepted` of its `drafted` tokens kept."""
        if self.acceptance is not None and drafted:
            self.acceptance.record(state.match, drafted, accepted)

    def close(self) -> None:
        self.drafter.close()


def make_speculator(mode: str, draft_max: int, model_drafter: Any = None) -> Speculator | None:
    """The Speculator a load asks for (`LoadSpec.speculative`), None for "off"."""
    if mode == "off":
        return None
    if model_drafter is not None:
        return Speculator(model_drafter, draft_max, adaptive=False)
    return Speculator(NgramDrafter(), draft_max, adaptive=mode == "auto")
