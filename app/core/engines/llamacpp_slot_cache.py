"""What a BatchRunner does with the tokens its slots keep, as slots.plan_reuse decides: a slot's state
saved to the RAM prompt cache and a cached one restored, a prefix copied from another slot; and idle slots
emptied for room."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from app.core.engines.slots import PromptCache, Reuse, SavedState, Slot

logger = logging.getLogger(__name__)


class SlotCache:
    """Mixed into the BatchRunner, whose attributes these are."""

    _lib: Any
    _ctx: Any
    _memory: Any
    _ctypes: Any
    slots: list[Slot]
    unified: bool
    cache: PromptCache
    n_ctx: int

    if TYPE_CHECKING:  # llamacpp_batch_images.ImageReading's: positions fall behind tokens after M-RoPE images

        def _position(self, tokens: list[int], n: int) -> int: ...

        def _hold(self, slot: Slot, tokens: list[int]) -> None: ...

    def _donors(self, slot: Slot) -> list[Slot]:
        """The slots `slot` may start from a copy of: any other holding tokens (their cells are shared or
        copied at the next decode, busy or not)."""
        return [s for s in self.slots if s is not slot and s.tokens]

    def _reuse(self, slot: Slot, reuse: Reuse) -> int:
        """Carry out what plan_reuse decided for `slot`; returns the prefix it now shares (0 when a saved
        state would not restore)."""
        if reuse.set_aside:
            self._save(slot)
        if reuse.restore is not None:
            return self._restore(slot, reuse.restore, reuse.shared)
        if reuse.donor is not None:
            self._copy_prefix(slot, reuse.donor, reuse.shared)
        return reuse.shared

    def _restore(self, slot: Slot, entry: SavedState, shared: int) -> int:
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        self._hold(slot, [])
        buf = (self._ctypes.c_uint8 * entry.size).from_buffer(entry.data)
        if self._lib.llama_state_seq_set_data(self._ctx.ctx, buf, entry.size, slot.seq_id) != entry.size:
            logger.warning("could not restore a cached prompt of %d tokens", len(entry.tokens))
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            return 0
        self._hold(slot, list(entry.tokens))
        logger.debug("slot %d: restored %d cached tokens from RAM", slot.seq_id, len(entry.tokens))
        return shared

    def _copy_prefix(self, slot: Slot, donor: Slot, prefix: int) -> None:
        """Start `slot` from `donor`'s first `prefix` cells (a system prompt or a document two conversations
        share, whose own slot was kept for its owner)."""
        mem, dst = self._memory, slot.seq_id
        end = self._position(donor.tokens, prefix)
        self._lib.llama_memory_seq_rm(mem, dst, 0, -1)
        if self.unified:
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, 0, end)  # the cells are shared, not copied
        else:
            # Across KV streams llama.cpp copies a whole stream (at the next decode); the rest is then dropped.
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, -1, -1)
            self._lib.llama_memory_seq_rm(mem, dst, end, -1)
        self._hold(slot, list(donor.tokens[:prefix]))
        logger.debug("slot %d: %d prompt tokens copied from slot %d", dst, prefix, donor.seq_id)

    def _save(self, slot: Slot) -> None:
        if not slot.tokens:
            return
        size = int(self._lib.llama_state_seq_get_size(self._ctx.ctx, slot.seq_id))
        if not self.cache.fits(size):
            return
        data = bytearray(size)
        buf = (self._ctypes.c_uint8 * size).from_buffer(data)
        written = int(self._lib.llama_state_seq_get_data(self._ctx.ctx, buf, size, slot.seq_id))
        if written == size:
            self.cache.put(slot.tokens, data, size)

    def forget(self) -> None:
        """Drop every cached prompt (the free slots' KV cells and the RAM cache)."""
        for slot in self.slots:
            if not slot.busy:
                self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
                self._hold(slot, [])
        self.cache.clear()

    def _free_cells(self, need: int) -> int:
        """The shared cache's free cells, idle slots' cached tokens emptied (least recently used first) until
        `need` fit or none is left to empty."""
        free = self.n_ctx - sum(len(s.tokens) for s in self.slots)
        return free + self._evict_idle(need - free) if need > free else free

    def _evict_idle(self, cells: int) -> int:
        freed = 0
        for slot in sorted((s for s in self.slots if not s.busy and s.tokens), key=lambda s: s.last_used):
            if freed >= cells:
                break
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            freed += len(slot.tokens)
            self._hold(slot, [])
        return freed
