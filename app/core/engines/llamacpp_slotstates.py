"""What a BatchRunner does with the tokens its slots keep: a free slot's state saved to the RAM prompt
cache and a cached one restored, a prefix copied from another slot, idle slots emptied for room."""

from __future__ import annotations

import logging
from typing import Any

from app.core.engines.slots import MIN_COPY_GAIN, MIN_REUSE, PromptCache, Slot, common_prefix

logger = logging.getLogger(__name__)


class SlotStates:
    """Mixed into the BatchRunner, whose attributes these are."""

    _lib: Any
    _ctx: Any
    _memory: Any
    _ctypes: Any
    slots: list[Slot]
    unified: bool
    cache: PromptCache

    def _swap_in(self, slot: Slot, tokens: list[int], shared: int) -> int:
        """Before `slot` is given to `tokens`: keep the conversation it holds in the RAM cache if this
        request would evict it, and restore a cached state that shares more of `tokens` than the slot does.
        Returns the prefix the slot now shares."""
        if self.cache.budget <= 0:
            return shared
        # A request that would drop a stretch of the slot's conversation (another one sharing only its
        # system prompt) saves it first: copying a sequence's cells costs far less than reading tokens again.
        evicting = len(slot.tokens) - shared >= MIN_COPY_GAIN or (
            len(slot.tokens) > 0 and shared < MIN_REUSE * len(slot.tokens)
        )
        found = self.cache.take(tokens, shared)
        if evicting or found is not None:
            self._save(slot)
        if found is None:
            return shared
        entry, reused = found
        self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        slot.tokens.clear()
        buf = (self._ctypes.c_uint8 * entry.size).from_buffer(entry.data)
        if self._lib.llama_state_seq_set_data(self._ctx.ctx, buf, entry.size, slot.seq_id) != entry.size:
            logger.warning("could not restore a cached prompt of %d tokens", len(entry.tokens))
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            return 0
        slot.tokens = list(entry.tokens)
        logger.debug("slot %d: restored %d cached tokens from RAM", slot.seq_id, len(entry.tokens))
        return reused

    def _copy_prefix(self, slot: Slot, tokens: list[int], shared: int) -> int:
        """Start `slot` from another slot's cells when that one shares a longer prefix with `tokens` (a
        system prompt or a document two conversations share, whose own slot was kept for its owner)."""
        others = [s for s in self.slots if s is not slot and s.tokens]
        donor = max(others, key=lambda s: common_prefix(s.tokens, tokens), default=None)
        if donor is None:
            return shared
        prefix = common_prefix(donor.tokens, tokens)
        if prefix - shared < MIN_COPY_GAIN:
            return shared
        if slot.tokens:
            self._save(slot)
        mem, dst = self._memory, slot.seq_id
        self._lib.llama_memory_seq_rm(mem, dst, 0, -1)
        if self.unified:
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, 0, prefix)  # the cells are shared, not copied
        else:
            # Across KV streams llama.cpp copies a whole stream (at the next decode); the rest is then dropped.
            self._lib.llama_memory_seq_cp(mem, donor.seq_id, dst, -1, -1)
            self._lib.llama_memory_seq_rm(mem, dst, prefix, -1)
        slot.tokens = list(donor.tokens[:prefix])
        logger.debug("slot %d: %d prompt tokens copied from slot %d", dst, prefix, donor.seq_id)
        return prefix

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

    def _evict_idle(self, cells: int) -> int:
        freed = 0
        for slot in sorted((s for s in self.slots if not s.busy and s.tokens), key=lambda s: s.last_used):
            if freed >= cells:
                break
            self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            freed += len(slot.tokens)
            slot.tokens.clear()
        return freed
