"""The embedding and reranking models documents use, as jobs on an engine host or the pool.

Indexing and search never touch an engine: they submit EmbedJob/RerankJob like the API does, so the engine's
owner thread runs them between other work, and a cancel stops a batch between two inputs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from app.core.library.store import Library, LocalModel
from app.core.runtime.jobs import EmbedJob, Job, JobHandle, RerankJob

Submit = Callable[[Job], JobHandle]
# What a job may take before the indexer gives up on it: a batch of 16 passages on a slow CPU is seconds.
JOB_TIMEOUT_S = 600.0


class EmbeddingFailed(Exception):
    """The model could not embed (str says why); `code` is the job's failure code."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class JobEmbedder:
    """Embedder (indexer.py) over a job queue: `submit` is EngineHost.submit or ModelPool.submit; `model` the
    library name each job names (None: the host's loaded model)."""

    def __init__(
        self, submit: Submit, model: str | None, context_tokens: int, cancel: threading.Event | None = None
    ) -> None:
        self.model = model
        self.context_tokens = context_tokens
        self._submit = submit
        self._cancel = cancel
        self._overflow_chars: int | None = None  # the shortest text the model refused as over its context
        self._fit_chars = 16  # the longest text cut from a refused one that it then took

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._overflow_chars is not None:
            # Texts as long as one already seen over the context are cut first to what fitted, so they share
            # a job with the rest instead of each costing a refused job and one of its own.
            texts = [t if len(t) < self._overflow_chars else t[: self._fit_chars] for t in texts]
        try:
            return self._embed(texts)
        except EmbeddingFailed as exc:
            if exc.code != "context_length_exceeded":
                raise
        # A passage sized by characters can still run past the model's context (text of many tokens per
        # character). The batch is split in halves until the one that does not fit is alone (the rest still
        # go in few jobs), and that one is read from its start, shortened until it fits. The passage is stored
        # whole; only its vector comes from its beginning.
        if len(texts) > 1:
            half = len(texts) // 2
            return np.concatenate([self.embed(texts[:half]), self.embed(texts[half:])])
        text = texts[0]
        self._overflow_chars = min(len(text), self._overflow_chars or len(text))
        while True:
            text = text[: len(text) // 2]
            try:
                vectors = self._embed([text])
            except EmbeddingFailed as exc:
                if exc.code != "context_length_exceeded" or len(text) < 16:
                    raise
                continue
            self._fit_chars = max(self._fit_chars, min(len(text), self._overflow_chars - 1))
            return vectors

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self._cancel is not None and self._cancel.is_set():
            raise EmbeddingFailed("stopped", "cancelled")
        handle = self._submit(EmbedJob(texts, model=self.model))
        _wait(handle, self._cancel)
        return np.asarray(handle.result.vectors, dtype=np.float32)

    def rerank(self, query: str, texts: list[str]) -> list[float]:
        handle = self._submit(RerankJob(query, texts, model=self.model))
        _wait(handle, self._cancel)
        return list(handle.result.scores)


def _wait(handle: JobHandle, cancel: threading.Event | None) -> None:
    end = time.monotonic() + JOB_TIMEOUT_S
    while not handle.wait(0.1):
        late = time.monotonic() > end
        if (cancel is not None and cancel.is_set()) or late:
            handle.cancel()
            handle.wait(30)
            raise EmbeddingFailed("the model took too long" if late else "stopped", "cancelled")
    if handle.error is not None:
        raise EmbeddingFailed(handle.error, handle.error_code)


def models_for(library: Library, role_of: Callable[[LocalModel], str], role: str = "embedding") -> list[LocalModel]:
    """The library's ready models that do `role` ("embedding" or "rerank"), most recently used first."""
    ready = [m for m in library.list() if m.ready and role_of(m) == role]
    return sorted(ready, key=lambda m: (-(m.last_used_at or 0.0), -m.added_at))
