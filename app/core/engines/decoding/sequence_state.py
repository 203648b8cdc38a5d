"""What every engine keeps of one generation, and how it ends: one state object for llama.cpp's batched
runner, MLX's batched runner and MLX's single stream, so time to first token, decode speed and the final
chunk are worked out one way whichever engine ran it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import Chunk, FinishReason, GenerationStats, SamplingParams
from app.core.engines.decoding.sequences import Slot


@dataclass(eq=False, kw_only=True)
class SequenceState:
    """One generation; a runner keys its chunks by this object (each engine's subclass adds its own parts)."""

    sampling: SamplingParams
    cancel: Any  # a threading.Event
    start: float  # perf_counter when it was admitted
    stats: GenerationStats
    slot: Slot | None = None  # None: a single stream with no slots
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    prefill_s: float = 0.0  # time spent reading its prompt, where a batched runner measures it
    shared: bool = False  # its prompt reused a cached prefix from another slot
    done: bool = False
    out: list[Chunk] = field(default_factory=list)  # chunks made since the runner last collected them

    def sampled(self, now: float | None = None) -> float:
        """A token came out (shown, or the one that ends it): the clock for the first token and decode speed."""
        now = time.perf_counter() if now is None else now
        if not self.first_token_at:
            self.first_token_at = now
            self.stats.time_to_first_token_s = now - self.start
            if self.prefill_s > 0:
                self.stats.prompt_tok_s = self.stats.prompt_tokens_evaluated / self.prefill_s
        self.last_token_at = now
        return now

    def finish(
        self,
        reason: FinishReason,
        tail: str,
        *,
        peak_memory: int,
        error: str | None = None,
        code: str | None = None,
        stop: str | None = None,
    ) -> Chunk:
        """It is over: its stats completed, its last chunk queued (and returned), its slot free again."""
        self.done = True
        stats = self.stats
        if not self.first_token_at:
            stats.time_to_first_token_s = time.perf_counter() - self.start
        n = stats.generated_tokens
        if n > 1 and self.last_token_at > self.first_token_at:
            stats.decode_tok_s = (n - 1) / (self.last_token_at - self.first_token_at)
        stats.peak_memory_bytes = peak_memory
        chunk = Chunk(text=tail, finish_reason=reason, stats=stats, error=error, error_code=code, stop_sequence=stop)
        self.out.append(chunk)
        if self.slot is not None:
            self.slot.busy = False
            self.slot.touch()
        return chunk
