"""Slots: the per-sequence KV bookkeeping of a batched engine, and the prompt-cache choice of a slot.

A slot is one llama.cpp sequence id in a shared context. It remembers which tokens its sequence holds in
the KV cache after a generation ends, so the next request that starts with those tokens (the same
conversation's next turn, or a shared system prompt) evaluates only the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.engines.base import Chunk, GenerateRequest


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)  # what this sequence holds in the KV cache, in order
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


def pick_slot(slots: list[Slot], tokens: list[int]) -> tuple[Slot, int] | None:
    """The free slot whose cached tokens share the longest prefix with `tokens`, and that prefix's length;
    ties and misses go to the least recently used one. None when every slot is busy."""
    free = [s for s in slots if not s.busy]
    if not free:
        return None
    best = max(free, key=lambda s: (common_prefix(s.tokens, tokens), -s.last_used))
    shared = common_prefix(best.tokens, tokens)
    if shared == 0:
        best = min(free, key=lambda s: s.last_used)
    return best, shared


class SequenceRunner(Protocol):
    """What a batched engine gives the host: sequences admitted into free slots, all advanced together.

    Owned by the host thread like the engine. `admit` raises EngineError for a bad request before
    anything runs; `step` decodes one batch and returns the chunks it produced, keyed by the value
    `admit` returned; a key's last chunk has `finish_reason`, after which its slot is free.
    """

    def free_slots(self) -> int: ...

    def active(self) -> int: ...

    def admit(self, request: GenerateRequest, cancel: Any) -> object: ...

    def step(self) -> list[tuple[object, Chunk]]: ...

    def shared(self, key: object) -> bool:
        """Whether the sequence ran beside others at any step (its speed is not a single stream's)."""
        ...
