"""The llama.cpp engine's batched path as the host sees it: the slots context opened beside the model's
weights, and the SequenceRunner over its BatchRunner (requests checked by the engine, then run together).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from app.core.engines.base import Chunk, GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.decoding.sequences import drain
from app.core.engines.decoding.speculative import make_speculator
from app.core.engines.errors import EngineError
from app.core.engines.llamacpp.batch import BatchRunner
from app.core.engines.llamacpp.cpu_share import CpuShare
from app.core.engines.llamacpp.options import adaptive_threads
from app.core.native import import_native

logger = logging.getLogger(__name__)


# A request checked and tokenized by the engine: (tokens, sampling, grammar, visible token ids, the images'
# chunks by the id their runs use in the tokens).
Prepared = tuple[list[int], SamplingParams, Any, frozenset[int], dict[int, Any]]


class LlamaSequences:
    """The SequenceRunner the host drives: requests checked by the engine, then run by the BatchRunner."""

    def __init__(self, runner: BatchRunner, prepare: Callable[[GenerateRequest], Prepared]) -> None:
        self.runner = runner
        self._prepare = prepare

    def free_slots(self) -> int:
        return self.runner.free_slots()

    def active(self) -> int:
        return self.runner.active()

    def can_admit(self, request: GenerateRequest) -> bool:
        return self.runner.free_slots() > 0  # every llama.cpp feature runs batched

    def shared(self, key: object) -> bool:
        return self.runner.shared(key)

    def admit(self, request: GenerateRequest, cancel: Any) -> object:
        start = time.perf_counter()
        tokens, sampling, grammar, visible, media = self._prepare(request)
        return self.runner.admit(tokens, sampling, grammar, visible, cancel, start, media)

    def step(self) -> list[tuple[object, Chunk]]:
        return self.runner.step()

    def forget(self) -> None:
        """Drop every cached prompt (the slots' KV cells and the RAM cache): the next prompt is read whole,
        as after a fresh load. For benchmarks that measure cold prompts; call it with no sequence running."""
        self.runner.forget()

    def run_one(self, request: GenerateRequest, cancel: Any) -> Iterator[Chunk]:
        """`Engine.generate` on a batched engine: this request alone (the host batches; direct callers,
        like the benchmark's runner, run one at a time)."""
        return drain(self.step, self.runner.abort, self.admit(request, cancel))


def open_slots(lib: Any, llm: Any, spec: LoadSpec, piece: Callable[[Any, int, bool], bytes]) -> tuple[Any, BatchRunner]:
    """A context with n_seq_max = slots over one KV cache of n_ctx cells shared by all (kv_unified) or
    n_ctx cells per slot, and the BatchRunner on it. Raises EngineError when llama.cpp cannot open it."""
    if spec.deterministic and spec.kv_unified and spec.slots > 1:
        raise EngineError("deterministic replies need each slot's own KV cells: load with kv_unified off")
    internals = import_native("llama_cpp._internals")
    params = type(llm.context_params).from_buffer_copy(llm.context_params)  # same threads, cache types, FA
    params.n_ctx = spec.n_ctx if spec.kv_unified else spec.n_ctx * spec.slots
    params.n_batch = min(spec.n_batch, spec.n_ctx)
    params.n_ubatch = min(spec.n_ubatch, params.n_batch)
    params.n_seq_max = spec.slots
    params.kv_unified = spec.kv_unified
    try:
        ctx = internals.LlamaContext(model=llm._model, params=params, verbose=False)
    except Exception as exc:  # ValueError("Failed to create llama_context"), usually memory
        raise EngineError(f"llama.cpp could not open a {spec.slots}-slot context: {exc}") from exc
    drafter = None
    # Deterministic: no drafts, as checking one decodes its tokens together (other rows, other kernels).
    speculative = "off" if spec.deterministic else spec.speculative
    if spec.draft_model is not None and speculative in ("auto", "draft"):
        from app.core.engines.llamacpp.draft import ModelDrafter

        try:
            drafter = ModelDrafter(lib, llm, spec)
        except EngineError:
            ctx.close()
            raise
    runner = BatchRunner(
        lib,
        llm,
        ctx,
        spec.slots,
        int(params.n_batch),
        piece,
        spec.seed,
        spec.kv_unified,
        0 if spec.deterministic else spec.prompt_cache_mib * 1024 * 1024,  # a saved state is not exact
        make_speculator(speculative, spec.drafts_at_most(), drafter),
        spec.deterministic,
        # A deterministic load keeps its threads: an operation that splits a sum across threads would sum
        # in another order on another count.
        CpuShare(int(params.n_threads)) if adaptive_threads() and not spec.deterministic else None,
    )
    logger.info(
        "opened %d slots of %d tokens (%s KV cache)",
        spec.slots,
        runner.n_ctx_seq,
        "one shared" if spec.kv_unified else "one per slot",
    )
    return ctx, runner
