"""What a BatchRunner does with the images in its prompts (llamacpp_vision): each step, the oldest sequence
whose next pending tokens are an image's run has that image encoded into its own cells, whole, while the
other sequences read and decode text in the step's batch."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app.core.engines.errors import EngineError
from app.core.engines.images import is_image

if TYPE_CHECKING:
    from app.core.engines.slots import Slot


class ImageReading:
    """Mixed into the BatchRunner, whose attributes these are."""

    _lib: Any
    _ctx: Any
    _memory: Any
    _running: list[Any]
    slots: list[Slot]
    unified: bool
    n_ctx_seq: int
    n_batch: int
    vision: Any  # a llamacpp_vision.Projector when the model sees images

    if TYPE_CHECKING:

        def _free_cells(self, need: int) -> int: ...

        def _end(self, seq: Any, reason: str, error: str | None = None, code: str | None = None) -> None: ...

    def _position(self, tokens: list[int], n: int) -> int:
        """Where the first `n` of `tokens` end in the sequence's positions (fewer than `n` after M-RoPE images)."""
        return self.vision.positions(tokens, n) if self.vision is not None and self.vision.mrope else n

    def _next_pos(self, slot: Slot) -> int:
        return len(slot.tokens) - slot.pos_gap

    def _hold(self, slot: Slot, tokens: list[int]) -> None:
        """Set what `slot` holds (its cells already match)."""
        slot.tokens = tokens
        slot.pos_gap = len(tokens) - self._position(tokens, len(tokens))

    def _cut(self, slot: Slot, n: int) -> None:
        """Keep `slot`'s first `n` tokens (never ending inside an image), its cells from there dropped."""
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, self._position(slot.tokens, n), -1)
        self._hold(slot, slot.tokens[:n])

    def _read_image(self) -> None:
        """Encode the oldest pending image of a sequence whose text before it is read, into its cells."""
        waiting = [s for s in self._running if s.pending and is_image(s.pending[0]) and not s.cancel.is_set()]
        if not waiting:
            return
        seq = min(waiting, key=lambda s: s.order)
        media = (seq.media or {})[seq.pending[0]]
        if self.unified and media.n_tokens > self._free_cells(media.n_tokens):
            self._end(seq, "error", "the context is full with other conversations; try again shortly")
            return
        if not self.unified and len(seq.slot.tokens) + media.n_tokens >= self.n_ctx_seq:
            self._end(seq, "length")
            return
        began = time.perf_counter()
        slot = seq.slot
        try:
            encoded = self.vision.evaluate(media, self._ctx.ctx, self._next_pos(slot), slot.seq_id, self.n_batch)
        except EngineError as exc:
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, self._next_pos(slot), -1)
            self._end(seq, "error", str(exc))
            return
        slot.tokens.extend(seq.pending[: media.n_tokens])
        slot.pos_gap += media.n_tokens - media.n_pos
        del seq.pending[: media.n_tokens]
        took = time.perf_counter() - began
        seq.stats.prompt_tokens_evaluated += media.n_tokens
        seq.stats.images_encoded += 1
        seq.stats.image_s += took
        seq.stats.image_encode_s += encoded
        seq.prefill_s += took


def text_run(pending: list[int]) -> int:
    """How many of the pending tokens come before the next image."""
    return next((i for i, t in enumerate(pending) if is_image(t)), len(pending))
