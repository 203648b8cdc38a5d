"""Embeddings from a GGUF: a pooled-output llama.cpp context, either the one the model was loaded with
(a model loaded for embeddings) or a second, small context opened on a chat model's weights, so an
embeddings request never evicts the model a chat is using. Many inputs share each decode, as in llama-server:
one decode per input cost some 45 ms even for two words. Owned by the engine host's thread."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from app.core.engines.errors import EngineError, Unsupported
from app.core.engines.inputs.embed_limits import check_cancel, check_embed_tokens

logger = logging.getLogger(__name__)

# The side context's size: inputs up to this many tokens. Its KV cache sits beside the chat model's
# (about 256 MiB for an 8B model at f16), so it is opened on the first request, not at load.
SIDE_CONTEXT = 2048
# The most tokens that inputs packed together take in one decode (an input longer than this still goes whole,
# alone). A decode attends every token to every other and masks out the other sequences, so that waste grows
# with the pack: 1,024 twelve-token inputs on an all-MiniLM-L6-shaped BERT cost 11-13 s of CPU in packs of
# 512 tokens, 8-9 s in packs of 128, against one decode's fixed cost (some 45 ms on a many-core CPU).
PACK_TOKENS = 256
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


def packed(lengths: Sequence[int], n_tokens: int, n_seqs: int) -> list[range]:
    """The inputs (by index, in order) that share each decode: as many as fit `n_tokens` tokens and `n_seqs`
    sequences, as llama.cpp's embedding example packs them; an input longer than `n_tokens` goes alone."""
    groups: list[range] = []
    start = used = 0
    for i, n in enumerate(lengths):
        if i > start and (used + n > n_tokens or i - start >= n_seqs):
            groups.append(range(start, i))
            start, used = i, 0
        used += n
    if lengths:
        groups.append(range(start, len(lengths)))
    return groups


class Embedder:
    """One pooled-output context and a batch of its micro-batch's tokens. Inputs share decodes, each its own
    sequence pooled on its own (llama-server's way): up to `pack_tokens` tokens and `n_seqs` inputs a decode,
    an input of up to `n_tokens` alone (one micro-batch: non-causal models need each input whole in one).
    The results match the inputs decoded alone (the attention mask keeps sequences apart) within rounding."""

    def __init__(self, lib: ModuleType, ctx: Any, n_tokens: int, *, owned: bool) -> None:
        self._lib = lib
        self._ctx = ctx
        self._internals = _internals()
        self.n_tokens = n_tokens  # the most tokens a decode takes, so the longest input
        self.pack_tokens = min(n_tokens, PACK_TOKENS)  # the most that several inputs take together
        # Several sequences only in a unified KV cache: a split one gives each sequence n_ctx / n_seq_max cells.
        unified = bool(getattr(ctx.params, "kv_unified", False))
        self.n_seqs = max(1, int(lib.llama_n_seq_max(ctx.ctx))) if unified else 1
        self._batch = self._internals.LlamaBatch(n_tokens=n_tokens, embd=0, n_seq_max=1, verbose=False)
        self._owned = owned
        model = ctx.model.model
        # The pooled vector's width: n_embd_out where a model projects its output (newer llama.cpp).
        self.n_embd = int(getattr(lib, "llama_model_n_embd_out", lib.llama_model_n_embd)(model))
        # BERT-likes have only an encoder: llama_encode runs them, llama_decode would refuse.
        self._encoder_only = bool(lib.llama_model_has_encoder(model) and not lib.llama_model_has_decoder(model))

    @classmethod
    def of(cls, lib: ModuleType, llm: Any) -> Embedder:
        """Over the context a model was loaded with (`embedding=True`: llama-cpp-python opens it with a unified
        KV cache and as many sequences as its batch or llama.cpp takes)."""
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
        # Many inputs a decode, sharing one KV cache of n_ctx cells (what sequences cost it: a few bytes each).
        params.n_seq_max = min(n_ctx, int(lib.llama_max_parallel_sequences()))
        params.kv_unified = True
        # Flash attention on the CPU rounds by the batch's shape: an input packed with others moved by up to 7e-2
        # (cosine 0.993) from its vector alone; without it, by 1e-7.
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
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
        embed_limits). `cancel` is checked before each decode, the chunk a cancel waits for."""
        pooling = self._lib.llama_pooling_type(self._ctx.ctx)
        if pooling == POOLING_NONE:
            raise Unsupported("this model's context has no pooling, so it gives no single vector per input")
        if pooling == POOLING_RANK:
            raise Unsupported("this model is a reranker: it scores documents (POST /v1/rerank), it gives no vectors")
        check_embed_tokens([len(tokens) for tokens in token_lists], self.n_tokens)
        out: list[list[float]] = []
        try:
            for group in packed([len(tokens) for tokens in token_lists], self.pack_tokens, self.n_seqs):
                check_cancel(cancel, len(out), len(token_lists))
                out += [_unit(vec) for vec in self._pooled([token_lists[i] for i in group], self.n_embd)]
        finally:
            self._ctx.kv_cache_clear()
        return out

    def rank(self, token_lists: list[list[int]], cancel: threading.Event | None = None) -> list[float]:
        """One relevance score per (query, document) pair, already tokenized and checked against
        rerank_limits, in a context loaded with rank pooling; `cancel` is checked before each decode."""
        if self._lib.llama_pooling_type(self._ctx.ctx) != POOLING_RANK:
            raise Unsupported("this model was not loaded as a reranker, so it gives no relevance scores")
        out: list[float] = []
        try:
            for group in packed([len(tokens) for tokens in token_lists], self.pack_tokens, self.n_seqs):
                check_cancel(cancel, len(out), len(token_lists), "documents")
                # The head's first output is the relevance logit (a reranker has one; a classifier's first).
                for i, head in zip(group, self._pooled([token_lists[i] for i in group], 1), strict=True):
                    if not math.isfinite(head[0]):
                        raise EngineError(f"the reranker gave no finite score for document {i}")
                    out.append(head[0])
        finally:
            self._ctx.kv_cache_clear()
        return out

    def _pooled(self, sequences: list[list[int]], width: int) -> list[list[float]]:
        """The first `width` values of each sequence's pooled output, from one decode of them all (copied:
        llama.cpp's buffer is rewritten by the next decode)."""
        self._ctx.kv_cache_clear()
        self._batch.reset()
        for seq, tokens in enumerate(sequences):
            # Every token an output: pooling reads them all (llama.cpp would otherwise override and warn).
            self._batch.add_sequence(tokens, seq, True)
        try:
            (self._ctx.encode if self._encoder_only else self._ctx.decode)(self._batch)
        except RuntimeError as exc:  # llama_decode returned non-zero: out of memory, a bad batch
            raise EngineError(f"embedding failed: {exc}") from exc
        out = []
        for seq in range(len(sequences)):
            ptr = self._lib.llama_get_embeddings_seq(self._ctx.ctx, seq)
            if not ptr:
                raise EngineError("llama.cpp returned no embedding for the input")
            out.append([float(v) for v in ptr[:width]])
        return out

    def close(self) -> None:
        """Frees the batch, and the context when it is ours; before the model is freed."""
        self._batch.close()
        if self._owned:
            self._ctx.close()


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _internals() -> ModuleType:
    from app.core.native import import_native

    return import_native("llama_cpp._internals")
