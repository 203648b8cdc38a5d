"""Indexing a collection's folders: what is found (links never followed out, hidden files left), files read
once by content, changes picked up alone, deleted files' passages gone, a crash or a cancel resumed without
embedding anything twice, a file that cannot be read a row that says why."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from app.core.documents.indexer import MAX_BATCH, Cancelled, Indexer, walk
from app.core.documents.parse_child import READER_NICE
from app.core.documents.parsing import ParseError, parse_file
from app.core.documents.passages import cut_passages, passage_chars
from app.core.documents.search import Searcher
from tests.core.documents.conftest import WordEmbedder

LONG = "\n\n".join(f"Paragraph {i} of the long file talks about the hearth and its stones. " * 4 for i in range(160))


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# Tea\n\nThe kettle boils water.\n\n## Green\n\nSteep for two minutes.\n")
    (root / "sub" / "b.txt").write_text("Error E1042 means the disk is full.\n")
    (root / "long.md").write_text(LONG)
    (root / "image.png").write_bytes(b"\x89PNG\r\n")  # not a document: not found at all
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("hidden")
    return root


def _indexer(store, embedder, **kw) -> Indexer:
    return Indexer(store, embedder, parse=parse_file, **kw)


def _indexed(store, embedder, tmp_path: Path):
    """A folder added to a new collection and indexed: (the folder, the collection, its indexer)."""
    root = _folder(tmp_path)
    c = store.create_collection("notes", embedder.model)
    indexer = _indexer(store, embedder)
    indexer.add(c, [root])
    indexer.run(c)
    return root, c, indexer


def _passages_of(path: Path, embedder: WordEmbedder) -> int:
    return len(cut_passages(parse_file(path).sections, passage_chars(embedder.context_tokens)))


def test_a_folder_is_indexed_and_searchable(store, embedder, tmp_path):
    root = _folder(tmp_path)
    c = store.create_collection("notes", embedder.model)
    indexer = _indexer(store, embedder)
    assert indexer.add(c, [root]) == 3
    result = indexer.run(c)
    assert (result.indexed, result.unchanged, result.skipped, result.failed) == (3, 0, 0, 0)
    files = {f.path.name: f for f in store.files(c.id)}
    assert set(files) == {"a.md", "b.txt", "long.md"} and {f.state for f in files.values()} == {"indexed"}
    assert files["long.md"].passages == _passages_of(root / "long.md", embedder) > 3
    assert result.passages == embedder.embedded == sum(f.passages for f in files.values())
    hit = Searcher(store).search("steep green tea", [store.collection("notes")], limit=1, embed=embedder.embed)[0]
    assert hit.file == root / "a.md" and "Steep" in hit.text and "Green" in hit.heading


def test_unchanged_files_are_never_embedded_again_and_a_change_is_read_alone(store, embedder, tmp_path):
    root, c, indexer = _indexed(store, embedder, tmp_path)
    before = embedder.embedded
    indexer.sync(c)
    assert indexer.run(c).passages == 0 and embedder.embedded == before
    # touched, same content: hashed, not read
    os.utime(root / "long.md", (1, 1))
    indexer.sync(c)
    result = indexer.run(c)
    assert (result.unchanged, result.passages, embedder.embedded) == (1, 0, before)
    # changed: only it is embedded, and its old passages are gone
    (root / "sub" / "b.txt").write_text("Error E2000 means the network is down.\n")
    indexer.sync(c)
    result = indexer.run(c)
    assert (result.indexed, result.passages) == (1, 1) and embedder.batches[-1] == [
        "Error E2000 means the network is down."
    ]
    s = Searcher(store)
    assert s.search("E1042", [c], mode="keyword") == []
    assert s.search("E2000", [c], mode="keyword")[0].file == root / "sub" / "b.txt"


def test_new_and_deleted_files_are_picked_up(store, embedder, tmp_path):
    root, c, indexer = _indexed(store, embedder, tmp_path)
    (root / "a.md").unlink()
    (root / "sub" / "new.md").write_text("A new note about lamps.")
    assert indexer.sync(c) == 3
    assert indexer.run(c).indexed == 1
    assert {f.path.name for f in store.files(c.id)} == {"b.txt", "long.md", "new.md"}
    assert Searcher(store).search("kettle", [c], mode="keyword") == []


def test_a_missing_source_keeps_its_documents(store, embedder, tmp_path):
    # An unplugged drive is not a deleted folder: its passages stay until the user removes it.
    root, c, indexer = _indexed(store, embedder, tmp_path)
    root.rename(tmp_path / "elsewhere")
    indexer.sync(c)
    assert store.collection("notes").files == 3


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_links_are_followed_only_to_files_inside_the_folder(tmp_path):
    root = _folder(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.md").write_text("not for the index")
    (root / "link-out.md").symlink_to(outside / "private.md")
    (root / "linked-dir").symlink_to(outside, target_is_directory=True)
    (root / "link-in.md").symlink_to(root / "a.md")
    found = {p.relative_to(root).as_posix() for p in walk(root)}
    assert found == {"a.md", "sub/b.txt", "long.md", "link-in.md"}


def test_a_crash_mid_file_resumes_at_the_passage_it_stopped_at(store, tmp_path):
    root = _folder(tmp_path)
    total = sum(_passages_of(p, WordEmbedder()) for p in (root / "a.md", root / "sub" / "b.txt", root / "long.md"))
    dying = WordEmbedder(fail_after=total - 5)  # dies inside long.md's last batches
    c = store.create_collection("notes", dying.model)
    _indexer(store, dying).add(c, [root])
    with pytest.raises(RuntimeError, match="died"):
        _indexer(store, dying).run(c)
    stored = store.collection("notes").passages
    assert 0 < stored < total and stored == dying.embedded  # every batch that came back was kept
    after = WordEmbedder()
    result = _indexer(store, after).run(c)
    assert after.embedded == total - stored  # the rest, nothing twice
    assert store.collection("notes").passages == total and result.failed == 0
    assert {f.state for f in store.files(c.id)} == {"indexed"}


def test_cancel_stops_between_batches_and_pause_holds(store, tmp_path):
    root = _folder(tmp_path)
    embedder = WordEmbedder()
    c = store.create_collection("notes", embedder.model)
    cancel = threading.Event()
    indexer = _indexer(store, embedder, cancel=cancel)
    indexer.add(c, [root])
    reached, release = threading.Event(), threading.Event()

    def gate() -> None:
        reached.set()
        assert release.wait(10)

    embedder.gate = gate
    indexer.pause()
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("e", _catch(lambda: indexer.run(c))))
    t.start()
    assert not reached.wait(0.3)  # paused before the first batch
    indexer.resume()
    assert reached.wait(10)
    cancel.set()
    release.set()
    t.join(10)
    assert isinstance(box["e"], Cancelled)
    assert embedder.embedded == len(embedder.batches[0])  # the batch in flight finished, no other started


def _catch(fn):
    try:
        return fn()
    except BaseException as exc:
        return exc


def test_a_file_that_cannot_be_read_is_a_row_that_says_why(store, embedder, tmp_path):
    root = _folder(tmp_path)
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "empty.md").write_text("   \n\n  ")
    c = store.create_collection("notes", embedder.model)
    indexer = _indexer(store, embedder)
    indexer.add(c, [root])
    result = indexer.run(c)
    assert (result.indexed, result.failed, result.skipped) == (3, 1, 1)
    rows = {f.path.name: f for f in store.files(c.id)}
    assert rows["broken.docx"].state == "failed" and rows["broken.docx"].reason
    assert rows["empty.md"].state == "skipped" and rows["empty.md"].reason


def test_the_parse_error_of_one_file_leaves_the_rest_indexed(store, embedder, tmp_path):
    root = _folder(tmp_path)

    def parse(path: Path):
        if path.name == "a.md":
            raise ParseError("took over 120 s to read")
        return parse_file(path)

    c = store.create_collection("notes", embedder.model)
    indexer = Indexer(store, embedder, parse=parse)
    indexer.add(c, [root])
    assert indexer.run(c).failed == 1
    assert store.file(c.id, root / "a.md").reason == "took over 120 s to read"
    assert store.collection("notes").passages == embedder.embedded > 0


def test_a_folder_of_100k_tiny_files_is_found_in_one_pass_and_embedded_many_files_a_job(store, tmp_path):
    root = tmp_path / "many"
    for i in range(100):  # hard links: 100k directory entries without writing 100k files
        folder = root / f"d{i:02d}"
        folder.mkdir(parents=True)
        first = folder / "n0000.txt"
        first.write_text(f"a tiny note {i} about the hearth\n")
        for j in range(1, 1000):
            os.link(first, folder / f"n{j:04d}.txt")
    embedder = WordEmbedder()
    c = store.create_collection("many", embedder.model)
    cancel = threading.Event()

    def progress(p):
        if p.files_done >= 1600:
            cancel.set()  # enough to see the batching; the rest waits for the next run

    indexer = _indexer(store, embedder, cancel=cancel, progress=progress)
    assert indexer.add(c, [root]) == 100_000
    assert len(store.files(c.id, "pending")) == 100_000
    with pytest.raises(Cancelled):
        indexer.run(c)
    # Jobs start at 16 files and grow with the embedder's pace: never a job per file.
    assert embedder.batches[0] == embedder.batches[0][:16] and len(embedder.batches[0]) == 16
    assert all(len(batch) >= 16 for batch in embedder.batches) and embedder.embedded >= 1600 - MAX_BATCH
    assert len(store.files(c.id, "indexed")) == embedder.embedded  # each file stored whole with its batch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own niceness is Linux's")
def test_files_are_read_on_a_thread_of_lower_priority(store, embedder, tmp_path):
    seen: list[tuple[str, int]] = []

    def parse(path: Path):
        seen.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return parse_file(path)

    root = _folder(tmp_path)
    c = store.create_collection("notes", embedder.model)
    indexer = _indexer(store, embedder)
    indexer.parse = parse
    indexer.add(c, [root])
    indexer.run(c)
    assert seen and all(name.startswith("hearth-documents-read") for name, _ in seen)
    assert {nice for _, nice in seen} == {min(19, os.nice(0) + READER_NICE)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == os.nice(0)  # the caller's is unchanged
