"""A real Documents (app.core.documents.service) over a database in tmp_path, whose embedding jobs a fake pool
answers with bag-of-words vectors (tests/core/documents/conftest.py): the chat's documents tests search real
collections, indexed on the service's own thread, with no model."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.documents.service import Documents
from app.core.documents.store import Collection
from app.core.runtime.jobs import EmbedJob
from tests.core.documents.conftest import word_vector

EMBEDDER = "word-bag"


class _Done:
    """A finished embedding job, as JobEmbedder reads it."""

    error: str | None = None
    error_code = None

    def __init__(self, vectors) -> None:
        self.result = type("Embedded", (), {"vectors": vectors})

    def wait(self, _timeout: float) -> bool:
        return True

    def cancel(self) -> None:
        pass


class WordPool:
    """The model pool's `submit` for embedding jobs only; counts the texts it embedded."""

    def __init__(self) -> None:
        self.embedded = 0

    def submit(self, job):
        assert isinstance(job, EmbedJob), f"only embeddings here, not {type(job).__name__}"
        self.embedded += len(job.texts)
        return _Done([word_vector(t) for t in job.texts])


class _Model:
    def __init__(self, name: str) -> None:
        self.name, self.ready = name, True


class _Library:
    def find(self, name: str):
        return _Model(name) if name == EMBEDDER else None

    def list(self):
        return [_Model(EMBEDDER)]


def word_documents(db: Path) -> Documents:
    docs = Documents(db, WordPool().submit, _Library(), role_of=lambda m: "embedding", context_of=lambda m: 512)  # type: ignore[arg-type]
    docs.start()
    return docs


def indexed(docs: Documents, name: str, paths: list[Path], timeout: float = 30) -> Collection:
    """Collection `name` holding `paths`, indexed (or `paths` added to it and indexed again)."""
    if docs.store.find_collection(name) is None:
        docs.create(name, EMBEDDER)
    docs.add(name, paths)
    assert docs.wait_idle(timeout)
    return docs.collection(name)


DISK = "Error E1042 means the disk is full: free some space and try again."


@pytest.fixture
def documents(tmp_path):
    """A real Documents over tmp_path, embedding with bag-of-words vectors."""
    docs = word_documents(tmp_path / "documents.sqlite3")
    yield docs
    docs.close()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A folder of two notes: the disk error (DISK) and tea."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "errors.md").write_text(f"# Errors\n\n{DISK}\n")
    (root / "tea.txt").write_text("Green tea steeps for two minutes in water below boiling.\n")
    return root
