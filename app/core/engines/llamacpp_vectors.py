"""What a GGUF engine answers besides chat: embeddings (`embed`) and reranking scores (`rerank`), from a pooled
context (llamacpp_embed) that is the model's own when it was loaded for them, else a second one opened on the
chat model's weights. Mixed into LlamaCppEngine; the engine host's thread."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from app.core.engines.base import Capabilities, Embeddings, ModelInfo, Rankings, utf8
from app.core.engines.embed_limits import check_cancel, check_embed_texts
from app.core.engines.errors import Unsupported
from app.core.engines.llamacpp_embed import Embedder
from app.core.engines.llamacpp_rerank import PairFormat, not_a_reranker
from app.core.engines.native_inflight import NativeActivity, native_run
from app.core.engines.rerank_limits import check_pair_tokens, check_rerank_texts
from app.core.models.roles import ModelRole


class VectorRequests:
    """Mixed into LlamaCppEngine, whose attributes these are."""

    capabilities: Capabilities
    info: ModelInfo | None
    native_activity: NativeActivity | None
    _lib: Any
    _embedder: Embedder | None
    _pooling: int
    _role: ModelRole
    _rerank_template: str | None
    _pair_format: PairFormat | None

    if TYPE_CHECKING:

        def _require(self) -> Any: ...

        def tokenize(self, text: str, *, special: bool = False) -> list[int]: ...

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        """Unit-length vectors. A model loaded for embeddings embeds in its own context; a chat model in a
        second one on the same weights, so its KV cache (and the chat's reusable prefix) is untouched."""
        llm = self._require()
        if not self.capabilities.embeddings:
            raise Unsupported("this model is a reranker: it scores documents (POST /v1/rerank), it gives no vectors")
        if not texts:
            return Embeddings([], 0)
        check_embed_texts(texts)  # before the tokenizer reads them
        model = llm._model
        # Specials on as the tokenizer defines them (BOS, BERT's CLS/SEP): embedding models are trained so.
        tokens = []
        for text in texts:  # up to 2 M characters in all: a cancel need not wait for every one
            check_cancel(cancel, 0, len(texts))
            tokens.append(list(model.tokenize(utf8(text), True, False)))
        embedder = self._embedder_for(llm)
        with native_run(self.native_activity, "embedding"):
            vectors = embedder.embed(tokens, cancel)
        return Embeddings(vectors, sum(len(t) for t in tokens))

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        """One relevance score per document (the reranker's raw logit: higher is more relevant), each from its
        (query, document) pair laid out as llama-server does (llamacpp_rerank), pairs sharing decodes."""
        llm = self._require()
        if not self.capabilities.rerank:
            raise Unsupported(not_a_reranker(self._role))
        check_rerank_texts(query, documents)  # before the tokenizer reads them
        if self._pair_format is None:
            self._pair_format = PairFormat.of(self._lib, llm._model.vocab, self._rerank_template)
        query_tokens, pairs = self._pair_format.pairs(
            lambda text, special: self.tokenize(text, special=special), query, documents, cancel
        )
        embedder = self._embedder_for(llm)
        check_pair_tokens(query_tokens, [len(p) for p in pairs], embedder.n_tokens)
        with native_run(self.native_activity, "reranking"):
            scores = embedder.rank(pairs, cancel)
        return Rankings(scores, sum(len(p) for p in pairs))

    def _embedder_for(self, llm: Any) -> Embedder:
        if self._embedder is None:
            if self.capabilities.chat:
                threads = int(self.info.extra.get("n_threads", 1)) if self.info else 1
                self._embedder = Embedder.beside(self._lib, llm, self._pooling, threads)
            else:
                self._embedder = Embedder.of(self._lib, llm)
        return self._embedder
