"""Speculative decoding for the batched llama.cpp engine: drafts proposed per sequence, checked in the step's batch.

A decoding sequence puts its next token and up to k drafted tokens into the step's batch, with logits at
each. The runner then samples with the sequence's own chain at each position in turn and goes on only
while the sampled token equals the draft there. Every emitted token is drawn from the model's own
distribution given the tokens before it (speculative sampling with a point-mass draft is exact), and the
chain sees exactly the tokens, and draws exactly the random numbers, it would without drafts: for a given
seed the output is the one plain decoding gives, at any temperature. Drafts only change how many tokens
one step yields.

Drafts come from prompt lookup (the tokens that followed the latest earlier occurrence of the sequence's
last few tokens, in its prompt and reply, or in the replies of recent sequences: a regenerated reply, an
agent's retry, a file handed back again) or from a draft model (llamacpp_draft.py). "auto" sizes each
prompt-lookup draft by what it is expected to earn on this machine (draft_cost.py).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.engines.draft_cost import AcceptanceModel, StepCost, best_length

logger = logging.getLogger(__name__)

# Longest and shortest n-gram looked up: a longer match predicts better, a 1-gram still often does in code.
NGRAM_MAX = 12
NGRAM_MIN = 2
# How far back a found match is measured (beyond NGRAM_MAX): 30 tokens verbatim predict more than 12.
MATCH_MEASURED = 32
# The memory of recent replies: each kept with the prompt tokens just before it (so a reply to the same
# prompt is drafted from its first token), MEMORY_REPLIES of them and MEMORY_TOKENS in all, newest kept.
MEMORY_CONTEXT = 16
MEMORY_REPLIES = 8
MEMORY_TOKENS = 16384
# A remembered reply drafts only on a match this long: a short one in another conversation's text predicts
# little (the sequence's own 2-gram still drafts from its own text).
MEMORY_MATCH = 8


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

    def lookup(self, k: int, n_min: int = 0, context: list[int] | None = None) -> tuple[list[int], int]:
        """`propose`, and how long the match behind it is (counted up to MATCH_MEASURED tokens back). With
        `context`, the suffix looked up is that one's (another sequence's tokens) rather than this index's."""
        seq = self.tokens
        ctx = seq if context is None else context
        if k <= 0:
            return [], 0
        end = len(ctx)
        for n in range(min(self.n_max, end), max(self.n_min, n_min) - 1, -1):
            at = self._after.get(tuple(ctx[end - n :]))
            if at is not None:
                m = n
                while m < MATCH_MEASURED and at - m - 1 >= 0 and m < end and seq[at - m - 1] == ctx[end - m - 1]:
                    m += 1
                return seq[at : at + k], m
        return [], 0


class ReplyMemory:
    """The replies of recent sequences (each with the end of its prompt), indexed for lookup by another
    sequence's last tokens. Owned by the host thread, like the runner that feeds it."""

    def __init__(self, replies: int = MEMORY_REPLIES, tokens: int = MEMORY_TOKENS) -> None:
        self._replies: deque[NgramIndex] = deque()
        self._max_replies = replies
        self._max_tokens = tokens

    def add(self, reply: NgramIndex) -> None:
        self._replies.appendleft(reply)  # newest first: on equal matches, the latest reply drafts
        total = sum(len(r.tokens) for r in self._replies)
        while len(self._replies) > 1 and (len(self._replies) > self._max_replies or total > self._max_tokens):
            total -= len(self._replies.pop().tokens)

    def lookup(self, k: int, context: list[int]) -> tuple[list[int], int]:
        """The draft from the remembered reply whose match with `context`'s end is longest (MEMORY_MATCH
        tokens at least), and that match's length; ([], 0) where none matches."""
        best: tuple[list[int], int] = ([], 0)
        for reply in self._replies:
            draft, match = reply.lookup(k, MEMORY_MATCH, context)
            if draft and match > best[1]:
                best = (draft, match)
        return best

    def clear(self) -> None:
        self._replies.clear()

    def __len__(self) -> int:
        return len(self._replies)


@dataclass(eq=False)
class SeqDrafts:
    """One sequence's drafting state: its history (prompt and reply) and this step's draft."""

    seq_id: int
    index: NgramIndex
    # Its reply (after the end of its prompt) as the memory will keep it; None where nothing is remembered.
    reply: NgramIndex | None = None
    context: int = 0  # how many of `reply`'s tokens are the prompt's
    draft: list[int] = field(default_factory=list)  # this step's drafted tokens, in the batch after the next token
    match: int = 0  # the n-gram match length behind `draft` ("auto")

    def extend(self, tokens: list[int]) -> None:
        """Tokens the sequence generated (accepted)."""
        self.index.extend(tokens)
        if self.reply is not None:
            self.reply.extend(tokens)


class Drafter(Protocol):
    """Proposes drafts for several sequences at once: (state, tokens wanted) in, tokens per sequence out."""

    def propose(self, wanted: list[tuple[SeqDrafts, int]]) -> list[list[int]]: ...

    def close(self) -> None: ...


class NgramDrafter:
    """Prompt lookup: from the sequence's own tokens, or from recent replies where they match longer."""

    def __init__(self, n_min: int = NGRAM_MIN) -> None:
        self.n_min = n_min
        self.memory = ReplyMemory()

    def lookup(self, state: SeqDrafts, k: int) -> tuple[list[int], int]:
        """Up to k tokens and the length of the match behind them."""
        own = state.index.lookup(k, self.n_min)
        if own[1] >= MATCH_MEASURED or not len(self.memory):
            return own
        remembered = self.memory.lookup(k, state.index.tokens)
        return remembered if remembered[1] > own[1] else own

    def propose(self, wanted: list[tuple[SeqDrafts, int]]) -> list[list[int]]:
        return [self.lookup(state, k)[0] for state, k in wanted]

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
        if not isinstance(self.drafter, NgramDrafter):
            return SeqDrafts(seq_id, index)
        reply = NgramIndex(n_min=MEMORY_MATCH)
        reply.extend(tokens[-MEMORY_CONTEXT:])
        return SeqDrafts(seq_id, index, reply, len(reply.tokens))

    def finished(self, state: SeqDrafts) -> None:
        """A sequence ended: its reply joins the memory (if it generated anything)."""
        memory = getattr(self.drafter, "memory", None)
        if memory is not None and state.reply is not None and len(state.reply.tokens) > state.context:
            memory.add(state.reply)
        state.reply = None

    def forget(self) -> None:
        """Drop the remembered replies (a benchmark's cold run)."""
        memory = getattr(self.drafter, "memory", None)
        if memory is not None:
            memory.clear()

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
        assert isinstance(self.drafter, NgramDrafter)
        draft, match = self.drafter.lookup(state, k)
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
