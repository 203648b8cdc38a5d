"""The Documents page over a real `Documents` (its store in tmp_path, its indexing thread) with a tiny real
embedding GGUF in the library and word-bag vectors for its jobs: a dropped folder becomes a collection whose
files show their states, pausing holds a run, a failed file says why, the collection's actions work, and
with no embedding model the page offers this machine's pick, whose Download goes through the queue (on the
fake Hub) and lands a model a collection is then made with."""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.core.documents.indexer import Progress
from app.core.documents.recommend import NOMIC
from app.core.documents.service import Documents, IndexStatus
from app.core.library import Library, import_path
from app.core.library.from_downloads import LibraryFeed
from app.core.runtime.jobs import EmbedJob, JobHandle
from app.core.runtime.resolve import ModelResolver
from app.core.settings import DocumentsSettings, Settings
from app.ui.documents.dialogs import ModelChoices
from app.ui.documents.page import DocumentsPage
from app.ui.documents.progress_strip import WAITING_FOR_CHAT, progress_text
from app.ui.download_button import DownloadFeed
from app.ui.downloads_panel import DownloadsPanel
from app.ui.settings_dialog import SettingsDialog
from tests.fakehub import FakeRepo
from tests.ui.hub_gui_fixtures import env, machine, pool_tasks  # noqa: F401

DIMS = 32


def vector(text: str) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    for w in re.findall(r"\w+", text.lower()):
        v[int(hashlib.blake2b(w.encode(), digest_size=4).hexdigest(), 16) % DIMS] += 1.0
    return v / (np.linalg.norm(v) or 1.0)


class WordJobs:
    """`submit` for Documents: answers each EmbedJob at once with word-bag vectors, unless `gate` is closed
    (then the indexing thread waits in it, as behind a busy engine)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()  # a job is held at the closed gate
        self.jobs = 0

    def __call__(self, job) -> JobHandle:
        assert isinstance(job, EmbedJob)
        handle = JobHandle(job)
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(30)
        self.jobs += 1
        handle.result = SimpleNamespace(vectors=[vector(t) for t in job.texts])
        handle.done.set()
        return handle


class Answers:
    """The page's dialogs, answered by the test; what was asked is kept."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []
        self.name = ""  # "" keeps the name the page proposes
        self.confirmed = True
        self.new_name = "Renamed"

    def new_collection(self, name, models, model):
        self.asked.append(("new", name, tuple(models), model))
        return (self.name or name or "Notes"), model

    def text(self, title, label, value):
        self.asked.append(("text", title, value))
        return self.new_name

    def confirm(self, title, text):
        self.asked.append(("confirm", title, text))
        return self.confirmed

    def choose_model(self, collection, current, models):
        return None

    def files(self):
        return []

    def folder(self):
        return None


def make_page(qtbot, documents, library, tasks, resolver, machine=None, **kw):  # noqa: F811
    settings = {"now": Settings()}
    page = DocumentsPage(
        documents,
        library,
        tasks,
        role_of=resolver.role,
        machine=lambda: machine,
        settings=lambda: settings["now"],
        save_settings=lambda s: settings.update(now=s),
        dialogs=Answers(),
        **kw,
    )
    qtbot.addWidget(page)
    page.resize(1000, 700)
    page.settings_box = settings  # the test reads what was saved
    return page


@pytest.fixture
def docs(tmp_path, tiny_encoder_gguf, pool_tasks):  # noqa: F811
    library = Library(tmp_path / "models", tmp_path / "library.db")
    import_path(library, tiny_encoder_gguf)
    resolver = ModelResolver(library, lambda: None)
    jobs = WordJobs()
    documents = Documents(
        tmp_path / "data" / "documents.sqlite3",
        jobs,
        library,
        role_of=resolver.role,
        context_of=resolver.context_length,
        watch_s=3600,
    )
    documents.start()
    yield SimpleNamespace(documents=documents, library=library, resolver=resolver, jobs=jobs, tasks=pool_tasks)
    jobs.gate.set()
    documents.close()
    library.close()


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "garden.md").write_text("# Garden\n\nTomatoes go in after the last frost.\n\nBasil likes the sun.\n")
    (root / "kitchen.txt").write_text("The bread rises overnight in a warm kitchen.\n")
    (root / "empty.txt").write_text("")  # no text: skipped, and why
    (root / "broken.pdf").write_bytes(b"this is not a PDF at all")  # cannot be read: failed, and why
    return root


def drop(page: DocumentsPage, paths: list[Path]) -> None:
    """A drop of files from a file manager, as Qt delivers it to the page."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(
        QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    page.dropEvent(event)
    assert event.isAccepted()


def states(page: DocumentsPage) -> dict[str, str]:
    """File name → its State cell, as the table shows them."""
    model = page.view.model
    return {model.index(r, 0).data(): model.index(r, 1).data() for r in range(model.rowCount())}


def test_a_dropped_folder_becomes_a_collection_whose_files_show_their_states(qtbot, docs, folder):
    page = make_page(qtbot, docs.documents, docs.library, docs.tasks, docs.resolver)
    page.show()
    qtbot.waitUntil(lambda: page.loaded and page.models_loaded, timeout=10_000)
    model_name = page.model_choices.embedding[0]
    assert page.empty.isVisible() and not page.split.isVisible()  # no collection yet: the way to make one
    drop(page, [folder])
    # No collection to add to: the page asks for one, named after the folder, with the library's embedding model.
    assert page.dialogs.asked[0] == ("new", "notes", (model_name,), model_name)
    qtbot.waitUntil(lambda: len(states(page)) == 4 and "Waiting" not in " ".join(states(page).values()), timeout=30_000)
    shown = states(page)
    assert shown["garden.md"] == "Indexed" and shown["kitchen.txt"] == "Indexed"
    assert shown["empty.txt"].startswith("Skipped: ") and len(shown["empty.txt"]) > len("Skipped: ")
    assert shown["broken.pdf"].startswith("Failed: ") and len(shown["broken.pdf"]) > len("Failed: ")
    (c,) = docs.documents.collections()
    assert c.name == "notes" and c.model == model_name and c.passages >= 2
    qtbot.waitUntil(lambda: page.view.details.full_text().startswith(f"Embedded by {model_name} · 4 files"))
    assert "on disk" in page.view.details.full_text() and page.split.isVisible() and not page.empty.isVisible()
    row = next(r for r in range(4) if page.view.model.index(r, 0).data() == "garden.md")
    assert int(page.view.model.index(row, 3).data()) >= 1  # its passages
    assert [page.view.filter.itemText(i) for i in range(page.view.filter.count())] == [
        "All (4)",
        "Indexed (2)",
        "Waiting (0)",
        "Skipped (1)",
        "Failed (1)",
    ]
    page.view.show_filter("failed")
    assert list(states(page)) == ["broken.pdf"]
    assert page.view.retry_button.isEnabled()


def test_pause_holds_the_run_until_resume(qtbot, docs, folder):
    docs.documents.create("notes")
    page = make_page(qtbot, docs.documents, docs.library, docs.tasks, docs.resolver)
    page.show()
    qtbot.waitUntil(lambda: page.loaded and page.selected == "notes", timeout=10_000)
    # A file of 60 sections: 60 passages, embedded in several batches.
    (folder / "long.md").write_text("".join(f"# Part {i}\n\nThe hearth keeps section {i} warm.\n\n" for i in range(60)))
    docs.jobs.gate.clear()  # the first batch waits in the engine
    page.add_paths([folder])
    assert docs.jobs.waiting.wait(30)
    qtbot.waitUntil(lambda: page.progress.isVisible() and page.progress.text.full_text().startswith("Indexing notes"))
    assert page.progress.pause_button.text() == "Pause"
    page.progress.pause_button.click()
    qtbot.waitUntil(lambda: page.progress.pause_button.text() == "Resume" and page.progress.hold.text() == "Paused")
    docs.jobs.gate.set()  # the batch in flight is stored; nothing after it runs while paused
    qtbot.waitUntil(lambda: docs.jobs.jobs == 1, timeout=10_000)
    assert not docs.documents.wait_idle(1.0)
    assert docs.jobs.jobs == 1 and docs.documents.status.paused
    page.progress.pause_button.click()  # Resume
    assert docs.documents.wait_idle(30)
    qtbot.waitUntil(lambda: states(page).get("kitchen.txt") == "Indexed", timeout=10_000)
    qtbot.waitUntil(lambda: not page.progress.isVisible())


def test_the_progress_line_says_where_the_run_is_and_why_it_waits(qtbot):
    running = IndexStatus(collection="notes", progress=Progress(2, 40, 212, Path("/n/a.md"), 125.0))
    assert progress_text(running) == "Indexing notes · file 3 of 40 · 212 passages · about 2 min 05 s left"
    assert progress_text(IndexStatus(queued=("papers",))) == "Waiting to index papers"
    from app.ui.documents.progress_strip import ProgressStrip

    strip = ProgressStrip()
    qtbot.addWidget(strip)
    strip.show()
    strip.show_status(IndexStatus(collection="notes", progress=running.progress, waiting_for_chat=True))
    assert strip.hold.text() == WAITING_FOR_CHAT and strip.hold.isVisible()
    strip.show_status(IndexStatus(error="notes: the embedding model 'x' is not in the library any more"))
    assert strip.isVisible() and strip.error.text().startswith("Indexing stopped: notes: the embedding model")
    assert not strip.pause_button.isVisible()
    strip.show_status(IndexStatus())
    assert not strip.isVisible()


def test_remove_retry_rename_and_delete_a_collection(qtbot, docs, folder):
    docs.documents.create("notes")
    docs.documents.add("notes", [folder])
    assert docs.documents.wait_idle(30)
    page = make_page(qtbot, docs.documents, docs.library, docs.tasks, docs.resolver)
    page.show()
    qtbot.waitUntil(lambda: len(states(page)) == 4, timeout=10_000)
    answers = page.dialogs
    # A file added on its own is removed for good (after a confirmation)...
    letter = folder.parent / "letter.txt"
    letter.write_text("Dear neighbour, the hedge needs trimming.\n")
    page.add_paths([letter])
    qtbot.waitUntil(lambda: states(page).get("letter.txt") == "Indexed", timeout=10_000)
    page.view.table.selectRow(next(r for r in range(5) if page.view.model.index(r, 0).data() == "letter.txt"))
    assert page.view.remove_button.isEnabled()
    page.view.remove_button.click()
    assert answers.asked[-1][0] == "confirm" and "letter.txt" in answers.asked[-1][2]
    assert "watches" not in answers.asked[-1][2]
    qtbot.waitUntil(lambda: "letter.txt" not in states(page), timeout=10_000)
    assert docs.documents.store.file(docs.documents.collection("notes").id, letter) is None
    # ... one in a watched folder too: the confirmation says it stays out of the folder from now on.
    page.view.table.selectRow(next(r for r in range(4) if page.view.model.index(r, 0).data() == "kitchen.txt"))
    page.view.remove_button.click()
    assert f"in {folder}, a folder notes watches: Hearth leaves it out" in answers.asked[-1][2]
    qtbot.waitUntil(lambda: "kitchen.txt" not in states(page), timeout=10_000)
    # Retry failed: the broken file is read again, and fails again with its reason.
    page.view.retry_button.click()
    qtbot.waitUntil(lambda: "again" in page.status.text(), timeout=10_000)
    assert docs.documents.wait_idle(30)
    qtbot.waitUntil(lambda: states(page).get("broken.pdf", "").startswith("Failed: "), timeout=10_000)
    # Rename: the list and the view follow the new name.
    page.rename()
    qtbot.waitUntil(lambda: page.selected == "Renamed" and page.view.name.text() == "Renamed", timeout=10_000)
    assert page.list.item(0).text() == "Renamed (3)"  # Retry looked at the folder again: kitchen.txt stayed out
    # Delete, refused then confirmed: the page goes back to its empty state.
    answers.confirmed = False
    page.delete()
    assert [c.name for c in docs.documents.collections()] == ["Renamed"]
    answers.confirmed = True
    page.delete()
    qtbot.waitUntil(lambda: page.empty.isVisible() and not page.split.isVisible(), timeout=10_000)
    assert docs.documents.collections() == []


def test_a_taken_name_says_why_in_words(qtbot, docs):
    docs.documents.create("notes")
    page = make_page(qtbot, docs.documents, docs.library, docs.tasks, docs.resolver)
    page.show()
    qtbot.waitUntil(lambda: page.loaded and page.models_loaded, timeout=10_000)
    page.dialogs.name = "Notes"
    page.new_collection()
    qtbot.waitUntil(lambda: page.status.isVisible(), timeout=10_000)
    assert page.status.text() == "A collection named 'Notes' already exists."
    assert page.status.property("status") == "error"


# ---- no embedding model: this machine's pick, downloaded through the queue ----


@pytest.fixture
def no_model(tmp_path, pool_tasks):  # noqa: F811
    library = Library(tmp_path / "models", tmp_path / "library.db")
    resolver = ModelResolver(library, lambda: None)
    documents = Documents(
        tmp_path / "data" / "documents.sqlite3",
        WordJobs(),
        library,
        role_of=resolver.role,
        context_of=resolver.context_length,
        watch_s=3600,
    )
    documents.start()
    yield SimpleNamespace(documents=documents, library=library, resolver=resolver, tasks=pool_tasks)
    documents.close()
    library.close()


def test_without_a_model_the_page_offers_this_machines_pick_and_downloads_it(
    qtbot,
    fake_hub,
    env,  # noqa: F811
    machine,  # noqa: F811
    tiny_encoder_gguf,
    folder,
):
    # The suggested repo on the fake Hub, its Q8_0 file a real (tiny) embedding model.
    fake_hub.add_repo(FakeRepo(NOMIC.repo, files={"nomic-embed-text-v1.5.Q8_0.gguf": tiny_encoder_gguf.read_bytes()}))
    library = env.library
    resolver = ModelResolver(library, lambda: None)
    documents = Documents(
        env.models.parent / "documents.sqlite3",
        WordJobs(),
        library,
        role_of=resolver.role,
        context_of=resolver.context_length,
        watch_s=3600,
    )
    documents.start()
    manager = env.manager()
    landing = LibraryFeed(manager, library)  # a finished download goes into My Models, as in the app
    panel = DownloadsPanel(manager, env.tasks, hub=env.hub)
    qtbot.addWidget(panel)
    feed = DownloadFeed(panel, library, env.tasks)
    try:
        page = make_page(
            qtbot, documents, library, env.tasks, resolver, machine, feed=feed, request_download=panel.request_download
        )
        page.show()
        qtbot.waitUntil(lambda: page.suggestions.isVisible() and bool(page.suggestions.rows), timeout=10_000)
        assert page.suggestions.title.text() == "Documents need an embedding model"
        assert not page.new_button.isEnabled() and not page.empty.isVisible()
        first = page.suggestions.rows[0]
        assert first.suggestion == NOMIC and first.button.text() == "Download"  # a CPU machine: the small model
        assert "nomic-embed-text-v1.5 · Q8_0" in first.title.text()
        # A folder dropped now waits for the collection the model will make.
        drop(page, [folder])
        assert "embedding model first" in page.status.text()
        first.button.click()
        qtbot.waitUntil(lambda: any(i.repo_id == NOMIC.repo for i in manager.items()), timeout=10_000)
        item = next(i for i in manager.items() if i.repo_id == NOMIC.repo)
        assert item.label == "Q8_0"
        # Downloaded, verified and in My Models: the button makes the collection with it.
        qtbot.waitUntil(lambda: first.button.text() == "Make a collection with it", timeout=30_000)
        first.button.click()
        asked = page.dialogs.asked[-1]
        assert asked[0] == "new" and asked[3].lower().startswith("nomic")
        qtbot.waitUntil(lambda: [c.model for c in documents.collections()] == [asked[3]], timeout=10_000)
        assert documents.wait_idle(30)
        qtbot.waitUntil(lambda: states(page).get("garden.md") == "Indexed", timeout=10_000)
        qtbot.waitUntil(lambda: not page.suggestions.isVisible(), timeout=10_000)
    finally:
        landing.close()
        manager.close()
        documents.close()


def test_a_downloaded_reranker_is_named_in_settings_for_searches(qtbot, no_model):
    from app.core.documents.recommend import JINA_TINY_RERANKER
    from app.ui.documents.suggestions import use_view

    model = SimpleNamespace(name="jina-reranker-v1-tiny-en Q8_0")
    page = make_page(qtbot, no_model.documents, no_model.library, no_model.tasks, no_model.resolver)
    assert use_view(JINA_TINY_RERANKER, model, in_use=False).text == "Use for searches"
    page.suggestions.use_requested.emit(JINA_TINY_RERANKER, model)  # its row's button, once downloaded
    assert page.settings_box["now"].documents.reranker == "jina-reranker-v1-tiny-en Q8_0"
    view = use_view(JINA_TINY_RERANKER, model, in_use=page._reranker_in_use(model))
    assert (view.text, view.enabled) == ("Used for searches", False)


def test_settings_offer_the_librarys_embedding_models_and_rerankers(qtbot, tmp_path):
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore

    paths = app_paths({"HEARTH_HOME": str(tmp_path / "home")}).ensure()
    store = SettingsStore(paths.settings_file)
    settings = Settings(documents=DocumentsSettings(reranker="gone-reranker"))
    choices = ModelChoices(embedding=["nomic Q8_0", "bge-m3 Q8_0"], rerankers=["jina Q8_0"])
    dialog = SettingsDialog(store, settings, paths, documents=choices)
    qtbot.addWidget(dialog)
    combo = dialog.embedding_model
    assert [combo.itemText(i) for i in range(combo.count())][1:] == ["nomic Q8_0", "bge-m3 Q8_0"]
    assert combo.currentData() == ""  # automatic
    assert dialog.reranker.currentText() == "gone-reranker (not in My Models)"  # kept, and said why
    combo.setCurrentIndex(combo.findData("bge-m3 Q8_0"))
    dialog.reranker.setCurrentIndex(dialog.reranker.findData("jina Q8_0"))
    dialog.watch_folders.setChecked(False)
    dialog.accept()
    saved = store.load().documents
    assert (saved.embedding_model, saved.reranker, saved.watch_folders) == ("bge-m3 Q8_0", "jina Q8_0", False)


def test_the_window_lists_the_documents_page_after_chat():
    from app.main import PAGES

    keys = [p.key for p in PAGES]
    assert keys.index("documents") == keys.index("chat") + 1
