"""The slots of a BatchRunner's context and what their KV cells hold, as slots.plan_reuse decides: a slot's
state saved to the RAM prompt cache and a cached one restored, a prefix copied from another slot, idle slots
emptied for room; and where a slot's tokens sit in its positions (behind them after M-RoPE images)."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from app.core.engines.decoding.sequences import PromptCache, SavedState, Slot, plan_reuse

logger = logging.getLogger(__name__)


def next_pos(slot: Slot) -> int:
    """The position `slot`'s next token takes."""
    return len(slot.tokens) - slot.pos_gap


class SlotCache:
    """A context's slots, their cells in llama.cpp's memory (`memory`, the context's) and the RAM prompt cache
    beside them. Owned by the engine host's thread, like the BatchRunner that holds it."""

    def __init__(
        self, lib: Any, ctx: Any, memory: Any, n_slots: int, *, n_ctx: int, unified: bool, cache_bytes: int
    ) -> None:
        """`n_ctx`: the context's cells in all; `unified`: one KV cache shared by the slots (else one each)."""
        self._lib = lib
        self._ctx = ctx
        self._memory = memory
        self.slots = [Slot(seq_id=i) for i in range(n_slots)]
        self.n_ctx = n_ctx
        self.unified = unified
        self.cache = PromptCache(cache_bytes)
        # A llamacpp.vision.Projector when the model sees images: with M-RoPE an image's positions are fewer
        # than its tokens.
        self.vision: Any = None

    # -- what a slot holds ------------------------------------------------------------------------

    def position(self, tokens: list[int], n: int) -> int:
        """Where the first `n` of `tokens` end in the sequence's positions (fewer than `n` after M-RoPE images)."""
        return self.vision.positions(tokens, n) if self.vision is not None and self.vision.mrope else n

    def hold(self, slot: Slot, tokens: list[int]) -> None:
        """Set what `slot` holds (its cells already match)."""
        slot.tokens = tokens
        slot.pos_gap = len(tokens) - self.position(tokens, len(tokens))

    def cut(self, slot: Slot, n: int) -> None:
        """Keep `slot`'s first `n` tokens (never ending inside an image), its cells from there dropped."""
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, self.position(slot.tokens, n), -1)
        self.hold(slot, slot.tokens[:n])

    # -- reuse ------------------------------------------------------------------------------------

    def reuse(self, slot: Slot, tokens: list[int], shared: int) -> int:
        """Start `slot` from the most of `tokens` that it, the RAM cache or another slot holds (plan_reuse,
        from the `shared` prefix it holds now); returns the prefix it now shares (0 when a saved state would
        not restore)."""
        reuse = plan_reuse(slot, tokens, shared, self.cache, self._donors(slot))
        if reuse.set_aside:
            self._save(slot)
        if reuse.restore is not None:
            return self._restore(slot, reuse.restore, reuse.shared)
        if reuse.donor is not None:
            self._copy_prefix(slot, reuse.donor, reuse.shared)
        return reuse.shared

    def _donors(self, slot: Slot) -> list[Slot]:
        """The slots `slot` may start from a copy of: any other holding tokens (their cells are shared or
        copied at the next decode, busy or not)."""
        return [s for s in self.slots if s is not slot and s.tokens]

    def _restore(self, slot: Slot, entry: SavedState, shared: int) -> int:
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        self.hold(slot, [])
        buf = (ctypes.c_uint8 * entry.size).from_buffer(entry.data)
        if self._lib.llama_state_seq_set_data(self._ctx.ctx, buf, entry.size, slot.seq_id) != entry.size:
            logger.warning("could not restore a cached prompt of %d tokens", len(entry.tokens))
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            return 0
        self.hold(slot, list(entry.tokens))
        logger.debug("slot %d: restored %d cached tokens from RAM", slot.seq_id, len(entry.tokens))
        return shared

    def _copy_prefix(self, slot: Slot, donor: Slot, prefix: int) -> None:
        """Start `slot` from `donor`'s first `prefix` cells (a system prompt or a document two conversations
        share, whose own slot was kept for its owner)."""
        mem, dst = self._memory, slot.seq_id
        end = self.position(donor.tokens, prefix)
        self._lib.llama_memory_seq_rm(mem, dst, 0, -1)
        if self.unified:
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, 0, end)  # the cells are shared, not copied
        else:
            # Across KV streams llama.cpp copies a whole stream (at the next decode); the rest is then dropped.
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, -1, -1)
            self._lib.llama_memory_seq_rm(mem, dst, end, -1)
        self.hold(slot, list(donor.tokens[:prefix]))
        logger.debug("slot %d: %d prompt tokens copied from slot %d", dst, prefix, donor.seq_id)

    def _save(self, slot: Slot) -> None:
        if not slot.tokens:
            return
        size = int(self._lib.llama_state_seq_get_size(self._ctx.ctx, slot.seq_id))
        if not self.cache.fits(size):
            return
        data = bytearray(size)
        buf = (ctypes.c_uint8 * size).from_buffer(data)
        written = int(self._lib.llama_state_seq_get_data(self._ctx.ctx, buf, size, slot.seq_id))
        if written == size:
            self.cache.put(slot.tokens, data, size)

    # -- room -------------------------------------------------------------------------------------

    def forget(self) -> None:
        """Drop every cached prompt (the free slots' KV cells and the RAM cache)."""
        for slot in self.slots:
            if not slot.busy:
                self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
                self.hold(slot, [])
        self.cache.clear()

    def free_cells(self, need: int) -> int:
        """The shared cache's free cells, idle slots' cached tokens emptied (least recently used first) until
        `need` fit or none is left to empty."""
        free = self.n_ctx - sum(len(s.tokens) for s in self.slots)
        return free + self.evict_idle(need - free) if need > free else free

    def evict_idle(self, cells: int) -> int:
        """Empty idle slots, least recently used first, until `cells` cells are freed or none is left; returns
        the cells freed."""
        freed = 0
        for slot in sorted((s for s in self.slots if not s.busy and s.tokens), key=lambda s: s.last_used):
            if freed >= cells:
                break
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            freed += len(slot.tokens)
            self.hold(slot, [])
        return freed
