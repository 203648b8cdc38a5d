"""Sampling under a grammar with a time budget per token (threat T39 in docs/security.md).

llama.cpp checks every candidate token against every parser stack of the grammar, in native code that
no cancel flag reaches: a grammar whose stacks multiply spends seconds to minutes on one token. So a
grammar sequence is sampled here in llama.cpp's own order (bias and penalties, the grammar, then the
sampling stages), with the grammar applied to the vocabulary in slices: between slices the clock and
the job's cancel flag are checked, and past the budget the token is abandoned with GrammarTooSlow. A
slice is ~1/12 of a 49k vocabulary, so an over-budget token stops within a slice's time of its budget.
"""

from __future__ import annotations

import ctypes
import threading
import time
from types import ModuleType
from typing import Any

from app.core.engines.base import SamplingParams
from app.core.engines.errors import EngineError
from app.core.engines.llamacpp.options import add_picking, add_shaping
from app.core.native import import_native

__all__ = ["GRAMMAR_SLICE", "GRAMMAR_TOKEN_BUDGET_S", "GrammarSampler", "GrammarTooSlow", "SamplingCancelled"]

# A grammar token on SmolLM2's 49k vocabulary costs 4-30 ms here with JSON-schema grammars; a 262k
# vocabulary (Gemma 3) about five times that, and a slow laptop three times more: ~0.5 s. Two seconds
# leaves that room and still frees the engine long before a client's patience runs out.
GRAMMAR_TOKEN_BUDGET_S = 2.0
GRAMMAR_SLICE = 4096  # candidates checked between looks at the clock


class GrammarTooSlow(EngineError):
    """Checking candidates against the grammar took longer than the budget for one token."""

    code = "schema_too_complex"

    def __init__(self, seconds: float, budget: float) -> None:
        super().__init__(
            f"the grammar took over {budget:g} s to check one token ({seconds:.1f} s so far); its JSON schema or "
            "pattern is too ambiguous for constrained output: simplify it (fewer nested repetitions)",
            seconds=round(seconds, 3),
            budget_s=budget,
        )


class SamplingCancelled(Exception):
    """The job's cancel flag was set while its token was being checked against the grammar."""


class GrammarSampler:
    """One sequence's sampler stages around its grammar: `sample` picks the token and accepts it in every
    stage, as llama_sampler_sample does for a chain. Owned by the engine host's thread."""

    def __init__(
        self,
        lib: ModuleType,
        llm: Any,
        sp: SamplingParams,
        grammar: Any,
        seed: int,
        budget_s: float = GRAMMAR_TOKEN_BUDGET_S,
    ) -> None:
        self._lib = lib
        self._np = import_native("numpy")
        internals = import_native(f"{lib.__name__}._internals")
        self.n_vocab = int(llm.n_vocab())
        self.budget_s = budget_s
        self.pre = internals.LlamaSampler()
        add_shaping(self.pre, llm, sp)
        self.grammar = lib.llama_sampler_init_grammar(
            llm._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not self.grammar:  # build_grammar parsed it already; only memory would fail here
            self.pre.close()
            raise EngineError("llama.cpp could not set up the grammar")
        self.post = internals.LlamaSampler()
        add_picking(self.post, sp, seed)
        np = self._np
        self._dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self._ids = np.arange(self.n_vocab, dtype=np.intc)

    def sample(self, ctx: Any, at: int, cancel: threading.Event | None = None) -> int:
        """The token at batch index `at`, accepted in every stage; GrammarTooSlow past the budget (the
        grammar then has not moved, so the sequence must end)."""
        lib, np = self._lib, self._np
        n = self.n_vocab
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, at), shape=(n,))
        cells = np.empty(n, dtype=self._dtype)
        cells["id"] = self._ids
        cells["logit"] = logits
        cells["p"] = 0.0
        base = cells.ctypes.data
        whole = self._array(base, n)
        lib.llama_sampler_apply(self.pre.sampler, ctypes.byref(whole))
        started = time.perf_counter()
        for first in range(0, n, GRAMMAR_SLICE):
            part = self._array(base + first * self._dtype.itemsize, min(GRAMMAR_SLICE, n - first))
            lib.llama_sampler_apply(self.grammar, ctypes.byref(part))
            spent = time.perf_counter() - started
            if spent > self.budget_s:
                raise GrammarTooSlow(spent, self.budget_s)
            if cancel is not None and cancel.is_set():
                raise SamplingCancelled
        lib.llama_sampler_apply(self.post.sampler, ctypes.byref(whole))
        if not 0 <= whole.selected < whole.size:
            raise EngineError("the grammar allows no token here")
        token = int(whole.data[whole.selected].id)  # a stage may sort the cells in place
        lib.llama_sampler_accept(self.pre.sampler, token)
        lib.llama_sampler_accept(self.grammar, token)
        lib.llama_sampler_accept(self.post.sampler, token)
        return token

    def _array(self, address: int, size: int) -> Any:
        lib = self._lib
        data = ctypes.cast(ctypes.c_void_p(address), lib.llama_token_data_p)
        return lib.llama_token_data_array(data=data, size=size, selected=-1, sorted=False)

    def close(self) -> None:
        self.pre.close()
        self.post.close()
        if self.grammar:
            self._lib.llama_sampler_free(self.grammar)
            self.grammar = None
