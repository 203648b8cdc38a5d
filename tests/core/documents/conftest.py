"""Documents tests: a store in tmp_path and an embedder whose vectors are the words' hashes (documents that
share words are near), counting what it embeds."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from app.core.documents.store import DocumentStore

DIMS = 64


class WordEmbedder:
    """Embedder (indexer.py) over bags of words: real enough that a query finds the passages that share its
    words, deterministic, and it counts the passages it was asked for."""

    model = "word-bag"
    context_tokens = 512

    def __init__(self, fail_after: int | None = None) -> None:
        self.embedded = 0
        self.batches: list[list[str]] = []
        self.fail_after = fail_after  # raise once this many texts are embedded (a crash mid-file)
        self.gate: Callable[[], None] | None = None  # called before each batch (tests hold a batch there)
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.gate is not None:
            self.gate()
        with self.lock:
            if self.fail_after is not None and self.embedded + len(texts) > self.fail_after:
                raise RuntimeError("the embedder died")
            self.embedded += len(texts)
            self.batches.append(list(texts))
        return np.stack([word_vector(t) for t in texts])


def word_vector(text: str) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    for w in re.findall(r"\w+", text.lower()):
        v[int(hashlib.blake2b(w.encode(), digest_size=4).hexdigest(), 16) % DIMS] += 1.0
    n = np.linalg.norm(v)
    return v / n if n else v


@pytest.fixture
def store(tmp_path: Path):
    s = DocumentStore(tmp_path / "data" / "documents.sqlite3")
    yield s
    s.close()


@pytest.fixture
def embedder() -> WordEmbedder:
    return WordEmbedder()
