"""A model's KV cache kept across generations on the MLX single-stream path, with the tokens it holds, so
the next prompt reads only what it does not share with them. The model and, with speculative decoding,
its draft model each hold one; `align` trims them together (the draft reads what the model reads).
"""

from __future__ import annotations

from typing import Any

from app.core.engines.decoding.sequences import common_prefix
from app.core.engines.inputs.images import image_start
from app.core.native import import_native


class HeldCache:
    """An mlx-lm prompt cache and the tokens in it, in order. Host thread."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cache: list[Any] | None = None
        self.tokens: list[int] = []

    def fresh(self) -> list[Any]:
        self.cache, self.tokens = import_native("mlx_lm.models.cache").make_prompt_cache(self.model), []
        return self.cache

    def forget(self) -> None:
        """Its state is unknown (a failed generation): the next one starts afresh."""
        self.cache, self.tokens = None, []

    def offset(self) -> int:
        offset = getattr(self.cache[0], "offset", None) if self.cache else 0
        return int(offset) if isinstance(offset, int) else 0

    def settle(self, sequence: list[int]) -> None:
        """After a generation over `sequence` (prompt, then every token fed): the cache holds a prefix of it."""
        held = self.offset()
        if held <= len(sequence):
            self.tokens = sequence[:held]
        else:  # should not happen; a cache that cannot be accounted for is dropped
            self.forget()


def align(ids: list[int], held: list[HeldCache]) -> int:
    """Trim every cache to the longest prefix they all share with `ids`, leaving at least one token to
    read (for logits) and never ending inside an image (images are read whole); returns its length. If one
    would not trim as asked, all start afresh."""
    cache_mod = import_native("mlx_lm.models.cache")
    common = len(ids) - 1
    for h in held:
        if h.cache is None or not cache_mod.can_trim_prompt_cache(h.cache):
            h.fresh()
        common = min(common, common_prefix(h.tokens, ids))
    common = image_start(ids, common)
    for h in held:
        if h.offset() > common:
            cache_mod.trim_prompt_cache(h.cache, h.offset() - common)
    if any(h.offset() != common for h in held):
        for h in held:
            h.fresh()
        common = 0
    for h in held:
        h.tokens = ids[:common]
    return common
