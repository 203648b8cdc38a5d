"""What a GGUF engine answers besides chat: embeddings (`embed`) and reranking scores (`rerank`), from a pooled
context (llamacpp.embed) that is the model's own when it was loaded for them, else a second one opened on the
chat model's weights."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.core.engines.base import Capabilities, Embeddings, Rankings, utf8
from app.core.engines.canary.inflight import NativeActivity, native_run
from app.core.engines.errors import Unsupported
from app.core.engines.inputs.embed_limits import check_cancel, check_embed_texts
from app.core.engines.inputs.rerank_limits import check_pair_tokens, check_rerank_texts
from app.core.engines.llamacpp.embed import Embedder
from app.core.engines.llamacpp.rerank import PairFormat, not_a_reranker
from app.core.models.roles import ModelRole


class Vectors:
    """The embeddings and rerank scores of one loaded model, and the pooled context they come from (opened on
    first use, closed before the model's weights). Owned by the engine host's thread, like the LlamaCppEngine
    that holds it; made by its load, closed by its unload."""

    def __init__(
        self,
        lib: Any,
        llm: Any,
        capabilities: Capabilities,
        *,
        role: ModelRole,
        pooling: int,
        n_threads: int,
        rerank_template: str | None,
        tokenize: Callable[[str, bool], list[int]],
    ) -> None:
        """`llm`: the loaded Llama; `pooling`: the side context's, for a chat model; `rerank_template`: the
        GGUF's own pair layout, if it has one; `tokenize(text, special)`: the engine's, without BOS."""
        self._lib = lib
        self._llm = llm
        self._capabilities = capabilities
        self._role = role  # what the file is for (roles.role_of), for the refusals' wording
        self._pooling = pooling
        self._n_threads = n_threads
        self.rerank_template = rerank_template
        self._tokenize = tokenize
        self._embedder: Embedder | None = None
        self._pair_format: PairFormat | None = None

    def embed(self, texts: list[str], cancel: threading.Event | None, activity: NativeActivity | None) -> Embeddings:
        """Unit-length vectors. A model loaded for embeddings embeds in its own context; a chat model in a
        second one on the same weights, so its KV cache (and the chat's reusable prefix) is untouched.
        `activity`: where the native run is marked (the engine's)."""
        if not self._capabilities.embeddings:
            raise Unsupported("this model is a reranker: it scores documents (POST /v1/rerank), it gives no vectors")
        if not texts:
            return Embeddings([], 0)
        check_embed_texts(texts)  # before the tokenizer reads them
        model = self._llm._model
        # Specials on as the tokenizer defines them (BOS, BERT's CLS/SEP): embedding models are trained so.
        tokens = []
        for text in texts:  # up to 2 M characters in all: a cancel need not wait for every one
            check_cancel(cancel, 0, len(texts))
            tokens.append(list(model.tokenize(utf8(text), True, False)))
        embedder = self.embedder()
        with native_run(activity, "embedding"):
            vectors = embedder.embed(tokens, cancel)
        return Embeddings(vectors, sum(len(t) for t in tokens))

    def rerank(
        self, query: str, documents: list[str], cancel: threading.Event | None, activity: NativeActivity | None
    ) -> Rankings:
        """One relevance score per document (the reranker's raw logit: higher is more relevant), each from its
        (query, document) pair laid out as llama-server does (llamacpp.rerank), pairs sharing decodes."""
        if not self._capabilities.rerank:
            raise Unsupported(not_a_reranker(self._role))
        check_rerank_texts(query, documents)  # before the tokenizer reads them
        if self._pair_format is None:
            self._pair_format = PairFormat.of(self._lib, self._llm._model.vocab, self.rerank_template)
        query_tokens, pairs = self._pair_format.pairs(self._tokenize, query, documents, cancel)
        embedder = self.embedder()
        check_pair_tokens(query_tokens, [len(p) for p in pairs], embedder.n_tokens)
        with native_run(activity, "reranking"):
            scores = embedder.rank(pairs, cancel)
        return Rankings(scores, sum(len(p) for p in pairs))

    def embedder(self) -> Embedder:
        """The pooled context, opened on first use: the model's own, or one beside a chat model's."""
        if self._embedder is None:
            if self._capabilities.chat:
                self._embedder = Embedder.beside(self._lib, self._llm, self._pooling, self._n_threads)
            else:
                self._embedder = Embedder.of(self._lib, self._llm)
        return self._embedder

    def close(self) -> None:
        """Frees the pooled context: it lives on the model's weights, so before they are freed."""
        embedder, self._embedder = self._embedder, None
        self._pair_format = None
        if embedder is not None:
            embedder.close()
