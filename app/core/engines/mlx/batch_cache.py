"""The KV caches MlxSequences' slots keep, as slots.plan_reuse decides: a finished sequence's cache stays with
its slot, a slot's conversation goes to the RAM prompt cache, and a request starts from the slot's own cache, a
RAM entry or a copy of another free slot's, trimmed to what the prompt shares."""

from __future__ import annotations

import copy
import logging
from typing import Any

from app.core.engines.decoding.sequences import MIN_COPY_GAIN, PromptCache, Slot, plan_reuse

logger = logging.getLogger(__name__)


class SlotCaches:
    """The slots, each free one's KV cache (holding exactly its `tokens`), and the RAM prompt cache beside them.
    Owned by the engine host's thread, like the MlxSequences that holds it."""

    def __init__(self, cache_mod: Any, model: Any, n_slots: int, cache_bytes: int) -> None:
        """`cache_mod`: mlx_lm.models.cache; `model`: what a fresh cache is made for."""
        self._cache_mod = cache_mod
        self._model = model
        self.slots = [Slot(seq_id=i) for i in range(n_slots)]
        self.cache = PromptCache(cache_bytes)
        self._caches: dict[int, list[Any]] = {}  # a free slot's KV cache, holding exactly slot.tokens

    def forget(self) -> None:
        """Drop every cached prompt (the free slots' caches and the RAM cache): the next prompt is read whole.
        Call it with no sequence running."""
        self._caches.clear()
        for slot in self.slots:
            if not slot.busy:
                slot.tokens = []
        self.cache.clear()

    def clear(self) -> None:
        """Drop every slot's cache (their state is unknown, or they are closing); the RAM cache stays."""
        self._caches.clear()
        for slot in self.slots:
            slot.tokens = []

    def cache_for(self, slot: Slot, ids: list[int], shared: int) -> tuple[list[Any], int]:
        """The KV cache a request in `slot` starts from and how many of `ids` it holds: the slot's own, a
        RAM cache entry's or a copy of another free slot's, whichever shares most, trimmed; else a fresh
        one. A cache set aside on the way goes to the RAM cache."""
        cache = self._caches.pop(slot.seq_id, None)
        held = list(slot.tokens) if cache is not None else []
        if cache is None:
            slot.tokens = []
        donors = [s for s in self.slots if s is not slot and not s.busy and s.seq_id in self._caches]
        reuse = plan_reuse(slot, ids, shared if cache is not None else 0, self.cache, donors)
        shared = reuse.shared
        if reuse.set_aside:
            self._stash(cache, held)
        if reuse.restore is not None:
            cache, held = reuse.restore.data, reuse.restore.tokens
        elif reuse.donor is not None:
            cache, held = copy.deepcopy(self._caches[reuse.donor.seq_id]), list(reuse.donor.tokens)
            logger.debug("slot %d: %d prompt tokens copied from slot %d", slot.seq_id, shared, reuse.donor.seq_id)
        elif reuse.set_aside:
            # Its own conversation went to the RAM cache whole; this prompt starts from a copy of the prefix
            # they share when that saves enough to be worth the copy.
            cache = copy.deepcopy(cache) if shared >= MIN_COPY_GAIN else None
        shared = min(shared, len(ids) - 1)  # the last prompt token is fed again for the first logits
        if cache is None or shared <= 0 or not self._cache_mod.can_trim_prompt_cache(cache):
            return self._cache_mod.make_prompt_cache(self._model), 0
        if len(held) > shared:
            self._cache_mod.trim_prompt_cache(cache, len(held) - shared)
        if _offset(cache) not in (None, shared):  # a cache that would not trim as asked: start afresh
            return self._cache_mod.make_prompt_cache(self._model), 0
        return cache, shared

    def _stash(self, cache: list[Any] | None, tokens: list[int]) -> None:
        if cache is not None and tokens:
            self.cache.put(tokens, cache, _nbytes(cache))

    def keep(self, slot: Slot, cache: list[Any] | None, tokens: list[int] | None, keys: list[int] | None) -> None:
        """A finished sequence's cache stays with its slot when it holds exactly its `tokens`; with images,
        `keys` is the prompt as the caches compare it (each image its run), which the slot then holds."""
        if cache is not None and tokens is not None and _offset(cache) in (None, len(tokens)):
            self._caches[slot.seq_id] = cache
            slot.tokens = list(tokens) if keys is None else keys + list(tokens[len(keys) :])
        else:
            slot.tokens = []


def _offset(cache: list[Any]) -> int | None:
    offset = getattr(cache[0], "offset", None) if cache else 0
    return int(offset) if isinstance(offset, int) else None


def _nbytes(cache: list[Any]) -> int:
    try:
        return int(sum(c.nbytes for c in cache))
    except Exception:  # a cache type that cannot say: not kept
        return 0
