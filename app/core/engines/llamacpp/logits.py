"""A llama.cpp context's logits rows as numpy views, and the greedy pick from one (the batched runner's
plain temperature 0 and the draft model's drafts)."""

from __future__ import annotations

import ctypes
from typing import Any

from app.core.engines.errors import EngineError
from app.core.native import import_native


class LogitRows:
    """Rows of one context's logits; a row is valid until the context's next decode. Owned by the thread
    that decodes on the context (the engine host's)."""

    def __init__(self, lib: Any, ctx: Any, n_vocab: int, keep: int) -> None:
        self._lib = lib
        self._ctx = ctx  # the llama_context pointer
        self._n_vocab = n_vocab
        self._np = import_native("numpy")
        # Views by address: making one costs ~50 µs a token right after a decode, looking one up ~10 µs.
        # A view is only the address and n_vocab, so the one kept for an address llama.cpp gives again is
        # the one that would be made. Past `keep` the output buffer was reallocated: start again.
        self._keep = keep
        self._views: dict[int, Any] = {}

    def row(self, at: int) -> Any:
        """The logits at batch index `at` (llama.cpp's own buffer, not a copy: read, never write)."""
        pointer = self._lib.llama_get_logits_ith(self._ctx, at)
        if not pointer:
            raise EngineError("llama.cpp kept no logits for the last token")
        address = ctypes.addressof(pointer.contents)
        view = self._views.get(address)
        if view is None:
            if len(self._views) >= self._keep:
                self._views.clear()
            view = self._views[address] = self._np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        return view

    def argmax(self, at: int) -> int:
        """The first largest logit, as llama.cpp's greedy sampler picks it, without the sampler's copy of
        every vocabulary entry into its candidate array."""
        return int(self.row(at).argmax())
