"""Embeddings from a GGUF: a pooled-output llama.cpp context, either the one the model was loaded with
(a model loaded for embeddings) or a second, small context opened on a chat model's weights, so an
embeddings request never evicts the model a chat is using. Owned by the engine host's thread."""

from __future__ import annotations

import logging
import math
import threading
from types import ModuleType
from typing import Any

from app.core.engines.embed_limits import check_cancel, check_embed_tokens
from app.core.engines.errors import EngineError, Unsupported

logger = logging.getLogger(__name__)

# The side context's size: inputs up to this many tokens. Its KV cache sits beside the chat model's
# (about 256 MiB for an 8B model at f16), so it is opened on the first request, not at load.
SIDE_CONTEXT = 2048
# llama.cpp's enum llama_pooling_type
POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = 0, 1, 2, 3, 4
# LoadSpec.pooling by name
POOLINGS = {"mean": POOLING_MEAN, "cls": POOLING_CLS, "last": POOLING_LAST, "rank": POOLING_RANK}


def pooling_for(declared: Any) -> int:
    """The pooling to embed with: what the GGUF declares (`<arch>.pooling_type`: CLS for BERT-likes, LAST
    for Qwen3-Embedding...), else mean pooling, which works for any model including chat models."""
    if isinstance(declared, int) and declared in (POOLING_MEAN, POOLING_CLS, POOLING_LAST):
        return declared
    return POOLING_MEAN


class Embedder:
    """One pooled-output context and a batch that holds a whole input: inputs go one at a time, each in
    a single decode (non-causal models need the input in one micro-batch)."""

    def __init__(self, lib: ModuleType, ctx: Any, n_tokens: int, *, owned: bool) -> None:
        self._lib = lib
        self._ctx = ctx
        self._internals = _internals()
        self.n_tokens = n_tokens  # the longest input
        self._batch = self._internals.LlamaBatch(n_tokens=n_tokens, embd=0, n_seq_max=1, verbose=False)
        self._owned = owned
        model = ctx.model.model
        # The pooled vector's width: n_embd_out where a model projects its output (newer llama.cpp).
        self.n_embd = int(getattr(lib, "llama_model_n_embd_out", lib.llama_model_n_embd)(model))
        # BERT-likes have only an encoder: llama_encode runs them, llama_decode would refuse.
        self._encoder_only = bool(lib.llama_model_has_encoder(model) and not lib.llama_model_has_decoder(model))

    @classmethod
    def of(cls, lib: ModuleType, llm: Any) -> Embedder:
        """Over the context a model was loaded with (`embedding=True`)."""
        n_ubatch = int(lib.llama_n_ubatch(llm._ctx.ctx))
        return cls(lib, llm._ctx, min(llm.n_ctx(), n_ubatch), owned=False)

    @classmethod
    def beside(cls, lib: ModuleType, llm: Any, pooling: int, n_threads: int) -> Embedder:
        """A second context on the loaded chat model's weights; raises EngineError if llama.cpp cannot make
        one (memory, or a model kind it refuses)."""
        n_ctx = min(SIDE_CONTEXT, max(16, int(llm._model.n_ctx_train()) or SIDE_CONTEXT))
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_ubatch = n_ctx
        params.n_seq_max = 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.embeddings = True
        params.pooling_type = pooling
        try:
            ctx = _internals().LlamaContext(model=llm._model, params=params, verbose=False)
        except Exception as exc:  # ValueError("Failed to create llama_context"), usually memory
            raise EngineError(f"llama.cpp could not open an embeddings context beside the chat model: {exc}") from exc
        logger.info("opened a %d-token embeddings context beside the chat model (pooling %d)", n_ctx, pooling)
        return cls(lib, ctx, n_ctx, owned=True)

    def embed(self, token_lists: list[list[int]], cancel: threading.Event | None = None) -> list[list[float]]:
        """One unit-length vector per input (already tokenized, specials included, checked against
        embed_limits). `cancel` is checked before each input's decode, the chunk a cancel waits for."""
        pooling = self._lib.llama_pooling_type(self._ctx.ctx)
        if pooling == POOLING_NONE:
            raise Unsupported("this model's context has no pooling, so it gives no single vector per input")
        if pooling == POOLING_RANK:
            raise Unsupported("this model is a reranker: it scores documents (POST /v1/rerank), it gives no vectors")
        check_embed_tokens([len(tokens) for tokens in token_lists], self.n_tokens)
        out: list[list[float]] = []
        try:
            for tokens in token_lists:
                check_cancel(cancel, len(out), len(token_lists))
                out.append(self._one(tokens))
        finally:
            self._ctx.kv_cache_clear()
        return out

    def rank(self, token_lists: list[list[int]], cancel: threading.Event | None = None) -> list[float]:
        """One relevance score per (query, document) pair, already tokenized and checked against
        rerank_limits, in a context loaded with rank pooling; `cancel` is checked before each pair's decode."""
        if self._lib.llama_pooling_type(self._ctx.ctx) != POOLING_RANK:
            raise Unsupported("this model was not loaded as a reranker, so it gives no relevance scores")
        out: list[float] = []
        try:
            for i, tokens in enumerate(token_lists):
                check_cancel(cancel, len(out), len(token_lists), "documents")
                # The head's first output is the relevance logit (a reranker has one; a classifier's first).
                score = float(self._pooled(tokens)[0])
                if not math.isfinite(score):
                    raise EngineError(f"the reranker gave no finite score for document {i}")
                out.append(score)
        finally:
            self._ctx.kv_cache_clear()
        return out

    def _one(self, tokens: list[int]) -> list[float]:
        vec = [float(v) for v in self._pooled(tokens)[: self.n_embd]]
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def _pooled(self, tokens: list[int]) -> Any:
        """The pooled output of one input, decoded alone (a pointer into llama.cpp's buffer)."""
        self._ctx.kv_cache_clear()
        self._batch.reset()
        # Every token an output: pooling reads them all (llama.cpp would otherwise override and warn).
        self._batch.add_sequence(tokens, 0, True)
        try:
            (self._ctx.encode if self._encoder_only else self._ctx.decode)(self._batch)
        except RuntimeError as exc:  # llama_decode returned non-zero: out of memory, a bad batch
            raise EngineError(f"embedding failed: {exc}") from exc
        ptr = self._lib.llama_get_embeddings_seq(self._ctx.ctx, 0)
        if not ptr:
            raise EngineError("llama.cpp returned no embedding for the input")
        return ptr

    def close(self) -> None:
        """Frees the batch, and the context when it is ours; before the model is freed."""
        self._batch.close()
        if self._owned:
            self._ctx.close()


def _internals() -> ModuleType:
    from app.core.native import import_native

    return import_native("llama_cpp._internals")
