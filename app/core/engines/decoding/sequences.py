"""Slots: the per-sequence KV bookkeeping of a batched engine, and the prompt-cache choice of a slot.

A slot is one llama.cpp sequence id in a shared context. It remembers which tokens its sequence holds in
the KV cache after a generation ends, so the next request that starts with those tokens (the same
conversation's next turn, or a shared system prompt) evaluates only the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import Chunk, Engine, GenerateRequest, SequenceRunner
from app.core.engines.inputs.images import image_start


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence holds in the KV cache, in order
    # How many fewer positions than tokens those take (M-RoPE images, llamacpp.vision): the next is at
    # len(tokens) - pos_gap.
    pos_gap: int = 0
    last_used: float = 0.0  # monotonic time its last generation ended (LRU order among the free ones)
    busy: bool = False

    def touch(self) -> None:
        self.last_used = time.monotonic()


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# A slot is reused for a request only if that keeps at least this share of what it caches: a shared
# system prompt alone must not send a second conversation into the first one's slot, evicting it.
MIN_REUSE = 0.5
# A prefix another slot holds is copied into the chosen one only when that saves this many tokens of
# prompt evaluation (between per-slot KV streams llama.cpp copies a whole stream). And with an empty slot
# free, a slot is reused only if that drops at most this many of its cached tokens: else the request goes
# to the empty slot (with the prefix copied), and the other conversation keeps its cache whole.
MIN_COPY_GAIN = 16


def pick_slot(slots: list[Slot], tokens: list[int]) -> tuple[Slot, int] | None:
    """The free slot whose cached tokens share the longest prefix with `tokens` (among those it would
    keep at least MIN_REUSE of, and, while an empty slot is free, drop at most MIN_COPY_GAIN of), and that
    prefix's length; ties and misses go to the least recently used one (an empty slot first). None when
    every slot is busy."""
    free = [s for s in slots if not s.busy]
    if not free:
        return None
    empty = any(not s.tokens for s in free)
    scored = [(common_prefix(s.tokens, tokens), s) for s in free]
    fits = [(n, s) for n, s in scored if n > 0 and n >= MIN_REUSE * len(s.tokens)]
    if empty:
        fits = [(n, s) for n, s in fits if len(s.tokens) - n <= MIN_COPY_GAIN]
    if fits:
        shared, best = max(fits, key=lambda p: (p[0], -p[1].last_used))
        return best, shared
    best = min(free, key=lambda s: (bool(s.tokens), s.last_used))
    return best, common_prefix(best.tokens, tokens)


class OneStream:
    """The SequenceRunner of an engine that runs one generation at a time (the fake engine, MLX and
    llama.cpp with one slot, a remote server): one slot, and `step` is its next chunk. It lets the host
    run every engine through the same loop (runtime.generation_loop.GenerationLoop). Owned by the host thread."""

    def __init__(self, generate: Callable[[GenerateRequest, Any], Iterator[Chunk]]) -> None:
        self._generate = generate
        self._key: object | None = None
        self._chunks: Iterator[Chunk] | None = None
        self._cancel: Any = None

    def free_slots(self) -> int:
        return 0 if self._chunks is not None else 1

    def active(self) -> int:
        return 1 - self.free_slots()

    def can_admit(self, request: GenerateRequest) -> bool:
        return self._chunks is None

    def admit(self, request: GenerateRequest, cancel: Any) -> object:
        """Starts the generation; an engine that checks the request eagerly raises here, a lazy one (a
        generator) at the first step, after the job's Started event, as when it ran alone."""
        chunks = iter(self._generate(request, cancel))
        key = object()
        self._key, self._chunks, self._cancel = key, chunks, cancel
        return key

    def step(self) -> list[tuple[object, Chunk]]:
        assert self._chunks is not None and self._key is not None
        key = self._key
        try:
            chunk = next(self._chunks, None)
        except BaseException:
            self._end()
            raise
        if chunk is None:  # the engine stopped without a last chunk
            chunk = Chunk(finish_reason="cancelled" if self._cancel.is_set() else "stop")
        if chunk.finish_reason is not None:
            self._end()
        return [(key, chunk)]

    def shared(self, key: object) -> bool:
        return False

    def _end(self) -> None:
        chunks, self._chunks, self._key = self._chunks, None, None
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # a generator's cleanup runs now, on this thread


def runner_of(engine: Engine) -> SequenceRunner:
    """The engine's batched runner when it declares one (`sequences`), else a OneStream over its `generate`."""
    return engine.sequences if engine.sequences is not None else OneStream(engine.generate)


Step = Callable[[], list[tuple[object, Chunk]]]


def drain(step: Step, abort: Callable[[object], None], key: object) -> Iterator[Chunk]:
    """`key`'s chunks as `step` produces them, the others' dropped: one request run alone on a batched
    runner (`Engine.generate` there). A caller that stops reading ends the sequence (`abort`): its slot
    is freed."""
    finished = False
    try:
        while not finished:
            for k, chunk in step():
                if k is key:
                    finished = chunk.finish_reason is not None
                    yield chunk
    finally:
        if not finished:
            abort(key)


@dataclass
class SavedState:
    tokens: list[int]
    data: Any  # the engine's saved sequence state (bytes-like)
    size: int  # bytes


class PromptCache:
    """Sequence states evicted from slots, kept in RAM within a byte budget (oldest dropped first), so a
    conversation that comes back after its slot went to another one is restored instead of re-read."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._entries: list[SavedState] = []  # oldest first

    @property
    def used(self) -> int:
        return sum(e.size for e in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def fits(self, size: int) -> bool:
        return 0 < size <= self.budget

    def put(self, tokens: list[int], data: Any, size: int) -> None:
        """Keep a state; one holding the same tokens or a prefix of them is superseded."""
        if not self.fits(size):
            return
        self._entries = [e for e in self._entries if e.tokens != tokens[: len(e.tokens)]]
        while self._entries and self.used + size > self.budget:
            self._entries.pop(0)
        self._entries.append(SavedState(list(tokens), data, size))

    def take(self, tokens: list[int], better_than: int) -> tuple[SavedState, int] | None:
        """Remove and return the entry sharing the longest prefix with `tokens` if that beats `better_than`
        tokens, with the prefix's length."""
        best = max(self._entries, key=lambda e: common_prefix(e.tokens, tokens), default=None)
        if best is None:
            return None
        shared = common_prefix(best.tokens, tokens)
        if shared <= better_than:
            return None
        self._entries.remove(best)
        return best, shared


@dataclass(frozen=True)
class Reuse:
    """How a slot takes a new prompt, decided once for every engine (`plan_reuse`) and carried out by each
    on its own cache (llama.cpp's sequence cells, mlx-lm's cache objects)."""

    set_aside: bool  # first, the slot's conversation goes to the RAM prompt cache whole
    restore: SavedState | None  # then the slot starts from this state, taken out of the RAM cache
    donor: Slot | None  # or from a copy of this slot's prefix
    shared: int  # the prefix of the prompt the slot holds once that is done; an image is kept whole or not at all


def plan_reuse(slot: Slot, tokens: list[int], shared: int, cache: PromptCache, donors: list[Slot]) -> Reuse:
    """For `slot` (as pick_slot chose it, sharing `shared` of `tokens`): a saved state in the RAM cache that
    shares more of the prompt, else one of `donors` (the slots an engine can copy from) whose prefix saves at
    least MIN_COPY_GAIN tokens of prompt more; and whether the slot's own conversation is set aside first,
    which it is when the prompt would drop a stretch of it or it makes way for a state or a copy."""
    held = len(slot.tokens)
    dropping = held > 0 and (held - shared >= MIN_COPY_GAIN or shared < MIN_REUSE * held)
    found = cache.take(tokens, shared) if cache.budget > 0 else None
    start = found[1] if found is not None else shared
    donor = max(donors, key=lambda s: common_prefix(s.tokens, tokens), default=None)
    gain = common_prefix(donor.tokens, tokens) - start if donor is not None else 0
    if donor is not None and gain >= MIN_COPY_GAIN:
        if found is not None:  # the copy holds more: the state goes back where it was
            cache.put(found[0].tokens, found[0].data, found[0].size)
        return Reuse(held > 0, None, donor, image_start(tokens, start + gain))
    if found is not None:
        return Reuse(held > 0, found[0], None, image_start(tokens, found[1]))
    return Reuse(dropping, None, None, image_start(tokens, shared))
