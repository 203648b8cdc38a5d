"""The documents service: collections made, indexed on its own thread through jobs on a (fake) pool, searched;
indexing holds while a chat turn generates, pauses and resumes, picks up changes in watched folders, and
resumes after a quit mid-way without embedding anything twice."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.core.documents.recommend import BGE_M3, JINA_TINY_RERANKER, NOMIC, recommend, why_not_reranker
from app.core.documents.service import Documents, IndexStatus, NoEmbeddingModel
from app.core.documents.store import INDEXED, DocumentsError
from app.core.models.devices import Device, Machine
from app.core.runtime.jobs import EmbedJob, RerankJob
from app.core.settings import DocumentsSettings
from tests.core.documents.conftest import word_vector


class FakeModel:
    def __init__(self, name: str, role: str) -> None:
        self.name = name
        self.role = role
        self.ready = True
        self.last_used_at = 0.0
        self.added_at = time.time()


class FakeLibrary:
    def __init__(self, *models: FakeModel) -> None:
        self.models = list(models)

    def list(self):
        return list(self.models)

    def find(self, name: str):
        return next((m for m in self.models if m.name == name), None)


class DoneHandle:
    """A finished job, as JobHandle reads to JobEmbedder."""

    def __init__(self, result=None, error: str | None = None) -> None:
        self.result, self.error, self.error_code = result, error, None

    def wait(self, _timeout: float) -> bool:
        return True

    def cancel(self) -> None:
        pass


class FakePool:
    """Answers EmbedJobs with bag-of-words vectors and RerankJobs by shared words; `gate` holds a batch."""

    def __init__(self) -> None:
        self.jobs: list = []
        self.gate: threading.Event | None = None
        self.lock = threading.Lock()

    def submit(self, job):
        if self.gate is not None:
            self.gate.wait(10)
        with self.lock:
            self.jobs.append(job)
        if isinstance(job, EmbedJob):
            return DoneHandle(SimpleNamespace(vectors=[word_vector(t) for t in job.texts]))
        assert isinstance(job, RerankJob)
        words = set(job.query.lower().split())
        return DoneHandle(SimpleNamespace(scores=[float(len(words & set(d.lower().split()))) for d in job.documents]))

    def embedded(self) -> list[str]:
        with self.lock:
            return [t for j in self.jobs if isinstance(j, EmbedJob) for t in j.texts]


@pytest.fixture
def pool():
    return FakePool()


def _docs(tmp_path: Path, pool: FakePool, library=None, **kw) -> Documents:
    library = library or FakeLibrary(FakeModel("embedder", "embedding"), FakeModel("chat", "chat"))
    docs = Documents(
        tmp_path / "data" / "documents.sqlite3",
        pool.submit,
        library,
        role_of=lambda m: m.role,
        context_of=lambda m: 512,
        **kw,
    )
    return docs


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "fire.md").write_text("# Hearth\n\nthe fire is warm in the hearth stone\n")
    (root / "river.txt").write_text("the river runs by the city of paris\n")
    return root


def test_a_collection_is_indexed_on_its_own_thread_and_searched(tmp_path, pool, folder):
    docs = _docs(tmp_path, pool)
    statuses: list[IndexStatus] = []
    docs.status_changed.connect(statuses.append)
    docs.start()
    try:
        c = docs.create("Notes")
        assert c.model == "embedder"  # the library's embedding model, not the chat model
        docs.add("Notes", [folder])
        assert docs.wait_idle(20)
        assert {f.path.name: f.state for f in docs.files("Notes")} == {"fire.md": INDEXED, "river.txt": INDEXED}
        assert any(s.collection == "Notes" and s.progress is not None for s in statuses)
        assert statuses[-1].collection is None and statuses[-1].last is not None
        hits = docs.search("warm fire", ["notes"], limit=1)  # names compare without case
        assert hits[0].file.name == "fire.md" and hits[0].collection == "Notes"
        # Every job named the collection's model, so the pool loads it on demand like any request's.
        assert {j.model for j in pool.jobs} == {"embedder"}
    finally:
        docs.close()


def test_no_embedding_model_is_an_error_that_names_one_to_download(tmp_path, pool):
    docs = _docs(tmp_path, pool, library=FakeLibrary(FakeModel("chat", "chat")))
    try:
        with pytest.raises(NoEmbeddingModel, match="nomic-embed-text"):
            docs.create("Notes")
        with pytest.raises(DocumentsError, match="not an embedding model"):
            docs.create("Notes", "chat")
        assert docs.collections() == []
    finally:
        docs.close()


def test_the_settings_choice_is_the_model_of_a_new_collection(tmp_path, pool):
    library = FakeLibrary(FakeModel("a", "embedding"), FakeModel("b", "embedding"))
    library.models[0].last_used_at = 10.0  # "a" is the library's latest used
    chosen = DocumentsSettings(embedding_model="b")
    docs = _docs(tmp_path, pool, library=library, settings=lambda: chosen)
    try:
        assert docs.create("One").model == "b"
        chosen = DocumentsSettings(embedding_model="gone")  # no longer in the library: the latest used
        assert docs.create("Two").model == "a"
    finally:
        docs.close()


def test_indexing_holds_while_a_chat_turn_generates(tmp_path, pool, folder):
    generating = threading.Event()
    generating.set()
    docs = _docs(tmp_path, pool, generating=generating.is_set)
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        deadline = time.monotonic() + 10
        while not docs.status.waiting_for_chat and time.monotonic() < deadline:
            docs.wait_idle(0.05)
        assert docs.status.waiting_for_chat and pool.embedded() == []
        generating.clear()  # the turn ends: indexing goes on
        assert docs.wait_idle(20)
        assert len(pool.embedded()) == 2 and not docs.status.waiting_for_chat
    finally:
        docs.close()


def test_pause_holds_after_the_batch_in_flight_and_resume_finishes(tmp_path, pool, folder):
    docs = _docs(tmp_path, pool)
    docs.pause()
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        assert not docs.wait_idle(0.5) and docs.status.paused and pool.embedded() == []
        docs.resume()
        assert docs.wait_idle(20) and len(pool.embedded()) == 2
    finally:
        docs.close()


def test_watched_folders_pick_up_new_changed_and_deleted_files(tmp_path, pool, folder):
    docs = _docs(tmp_path, pool, watch_s=0.2)
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        assert docs.wait_idle(20)
        (folder / "new.md").write_text("a lantern by the door\n")
        (folder / "river.txt").write_text("the river is frozen this winter\n")
        (folder / "fire.md").unlink()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            names = {f.path.name: f.state for f in docs.files("Notes")}
            if names == {"new.md": INDEXED, "river.txt": INDEXED} and "frozen" in " ".join(pool.embedded()):
                break
            docs.wait_idle(0.2)
        assert {f.path.name: f.state for f in docs.files("Notes")} == {"new.md": INDEXED, "river.txt": INDEXED}
        assert docs.search("lantern", limit=1)[0].file.name == "new.md"
        assert not docs.search("warm hearth stone", limit=5, mode="keyword")  # the deleted file's passages went
        # the unchanged file is never embedded again; each change once
        assert sum("lantern by the door" in t for t in pool.embedded()) == 1
    finally:
        docs.close()


def test_a_quit_mid_index_resumes_on_the_next_start_without_embedding_twice(tmp_path, pool):
    root = tmp_path / "long"
    root.mkdir()
    paragraphs = "\n\n".join(f"paragraph {i} " + "words of the long manual " * 60 for i in range(40))
    (root / "manual.md").write_text(paragraphs)
    pool.gate = threading.Event()
    docs = _docs(tmp_path, pool)
    docs.start()
    docs.create("Manual")
    docs.add("Manual", [root])
    pool.gate.set()
    deadline = time.monotonic() + 20
    while len(pool.embedded()) < 16 and time.monotonic() < deadline:
        docs.wait_idle(0.01)
    pool.gate.clear()  # the next batch waits: the quit comes with a file half-embedded
    closer = threading.Thread(target=docs.close)
    closer.start()
    while not docs._cancel_run.is_set() and closer.is_alive():
        closer.join(0.01)
    pool.gate.set()  # the batch in flight ends (stored whole), then the run stops
    closer.join(20)
    first = len(pool.embedded())
    pool.gate.set()
    docs = _docs(tmp_path, pool)
    docs.start()
    try:
        assert docs.wait_idle(30)
        (row,) = docs.files("Manual")
        assert row.state == INDEXED and row.passages == row.total
        assert first < row.total == len(pool.embedded())  # the rest only: nothing embedded twice
    finally:
        docs.close()


def test_a_loaded_reranker_orders_the_results(tmp_path, pool, folder):
    library = FakeLibrary(FakeModel("embedder", "embedding"), FakeModel("ranker", "rerank"))
    loaded: list[str] = []
    docs = _docs(tmp_path, pool, library=library, loaded_models=lambda: list(loaded))
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        assert docs.wait_idle(20)
        docs.search("the city", limit=2)
        assert not any(isinstance(j, RerankJob) for j in pool.jobs)  # none loaded: none used
        loaded.append("ranker")
        hits = docs.search("river paris", limit=2)
        assert hits[0].file.name == "river.txt"
        assert [j.model for j in pool.jobs if isinstance(j, RerankJob)] == ["ranker"]
    finally:
        docs.close()


def test_deleting_a_collection_mid_index_stops_its_run(tmp_path, pool, folder):
    pool.gate = threading.Event()  # the first batch waits
    docs = _docs(tmp_path, pool)
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        deadline = time.monotonic() + 10
        while docs.status.collection != "Notes" and time.monotonic() < deadline:
            docs.wait_idle(0.02)
        releaser = threading.Timer(0.3, pool.gate.set)
        releaser.start()
        docs.delete("Notes")
        releaser.join()
        assert docs.wait_idle(10) and docs.collections() == []
        assert docs.store.passages(list(range(1, 50))) == {}
    finally:
        docs.close()


def _machine(*, cores: int = 2, gpu_bytes: int = 0, unified: bool = False) -> Machine:
    cpu = Device("CPU", "cpu", 16 << 30, 12 << 30, 40.0)
    gpus = (Device("CUDA0", "cuda", gpu_bytes, gpu_bytes, 900.0),) if gpu_bytes else ()
    return Machine("cuda" if gpus else "cpu", cpu, gpus, cores=cores, unified=unified)


def test_the_recommendation_follows_the_hardware():
    assert recommend(_machine()) == [NOMIC]
    assert "seconds" in why_not_reranker(_machine())
    assert recommend(_machine(cores=8)) == [NOMIC, JINA_TINY_RERANKER]
    picks = recommend(_machine(gpu_bytes=8 << 30))
    assert picks[0] == BGE_M3 and picks[1].role == "rerank" and why_not_reranker(_machine(gpu_bytes=8 << 30)) is None
    assert recommend(_machine(gpu_bytes=2 << 30)) == [NOMIC]  # too little free VRAM for both: the CPU's pick
    assert recommend(_machine(unified=True))[0] == BGE_M3
    assert NOMIC.spec == "nomic-ai/nomic-embed-text-v1.5-GGUF:Q8_0"


def test_a_file_removed_from_a_watched_folder_stays_out_until_added_again(tmp_path, pool, folder):
    docs = _docs(tmp_path, pool, watch_s=0.1)
    docs.start()
    try:
        docs.create("Notes")
        docs.add("Notes", [folder])
        assert docs.wait_idle(20)
        assert docs.remove("Notes", [folder / "fire.md"]) == 1
        docs.sync("Notes")
        assert docs.wait_idle(20)
        assert [f.path.name for f in docs.files("Notes")] == ["river.txt"]
        assert not docs.search("warm hearth stone", mode="keyword")
        docs.add("Notes", [folder / "fire.md"])  # added by hand: found again
        assert docs.wait_idle(20)
        assert sorted(f.path.name for f in docs.files("Notes")) == ["fire.md", "river.txt"]
        assert docs.remove("Notes", [folder]) == 2  # the folder itself: everything under it goes
        assert docs.files("Notes") == []
    finally:
        docs.close()


def test_a_folder_that_is_slow_to_look_at_is_looked_at_less_often(tmp_path, pool, folder):
    docs = _docs(tmp_path, pool, watch_s=0.1)
    docs.start()
    try:
        assert docs.watch_interval() == 0.1
        docs.create("Notes")
        docs.add("Notes", [folder])
        assert docs.wait_idle(20)
        took = sum(docs._sync_s.values())
        assert took > 0 and docs.watch_interval() == max(0.1, 20 * took)
        docs._sync_s[docs.collection("Notes").id] = 3.0  # a walk of 3 s: the next look in a minute
        assert docs.watch_interval() == 60.0
    finally:
        docs.close()
