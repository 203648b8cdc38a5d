"""PartialFile on its own: what a resume keeps, when it must re-hash, restart, full-disk truncation, the end."""

from __future__ import annotations

import hashlib

import pytest

from app.core.downloads.partial import PartialFile, PartialState, Sidecar
from app.core.downloads.spec import Source

DATA = hashlib.shake_256(b"partial").digest(10_000)
SHA = hashlib.sha256(DATA).hexdigest()


def source(**changes) -> Source:
    base = dict(
        url="https://hub/org/m/resolve/c1/m.gguf",
        path="m.gguf",
        sha256=SHA,
        size=len(DATA),
        repo_id="org/m",
        commit="c1",
    )
    return Source(**{**base, **changes})


@pytest.fixture
def paths(tmp_path):
    return tmp_path / "m.gguf.part", tmp_path / "m.gguf.part.json"


def add(partial: PartialFile, data: bytes) -> None:
    """What the writer and hasher threads do for one buffer."""
    view = memoryview(data)
    assert partial.write(view, partial.done) == len(data)
    partial.hashed(view)


def test_fresh_partial_records_what_it_holds(paths):
    part, side = paths
    p = PartialFile(part, side, source())
    assert p.open() is False and p.state() == PartialState(0, len(DATA), None)
    saved = Sidecar.load(side)
    assert (saved.path, saved.size, saved.sha256, saved.commit) == ("m.gguf", len(DATA), SHA, "c1")
    p.close()


def test_a_new_object_rehashes_the_prefix_and_finishes_with_the_right_hash(paths, tmp_path):
    part, side = paths
    first = PartialFile(part, side, source())
    first.open()
    add(first, DATA[:4000])
    first.learn(len(DATA), "e1")
    first.close()
    again = PartialFile(part, side, source(commit="c2"))  # as after an app restart, from a newer commit
    assert again.open() is True and again.state() == PartialState(4000, len(DATA), "e1")
    assert again.rehash() >= 0
    add(again, DATA[4000:])
    assert again.mismatch() is None
    again.finish(tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == DATA and not part.exists() and not side.exists()


def test_same_object_reuses_its_hash_state_only_while_the_file_is_untouched(paths):
    part, side = paths
    p = PartialFile(part, side, source())
    p.open()
    add(p, DATA[:3000])
    p.close()
    assert p.open() is False and p.done == 3000  # paused and resumed in this process
    p.close()
    with open(part, "ab") as f:  # someone else changed the file meanwhile
        f.write(b"x")
    assert p.open() is True and p.done == 3001
    p.close()


def test_a_partial_of_other_content_is_discarded(paths):
    part, side = paths
    p = PartialFile(part, side, source())
    p.open()
    add(p, DATA[:2000])
    p.close()
    other = PartialFile(part, side, source(sha256="ef" * 32))
    assert other.open() is False and other.done == 0 and part.stat().st_size == 0
    assert Sidecar.load(side).sha256 == "ef" * 32
    other.close()


def test_bytes_without_a_known_size_are_not_trusted(paths):
    part, side = paths
    p = PartialFile(part, side, source(size=None))
    p.open()
    add(p, DATA[:2000])
    p.close()  # the size never arrived, so the sidecar cannot vouch for the bytes
    again = PartialFile(part, side, source(size=None))
    assert again.open() is False and again.done == 0
    again.close()


def test_restart_learn_and_keep_hashed(paths):
    part, side = paths
    p = PartialFile(part, side, source(size=None))
    p.open()
    p.learn(len(DATA), "e1")
    assert p.total == len(DATA) and Sidecar.load(side).size == len(DATA) and Sidecar.load(side).etag == "e1"
    add(p, DATA[:5000])
    p.write(memoryview(DATA[5000:6000]), 5000)  # written but never hashed (the disk filled up)
    p.keep_hashed()
    assert part.stat().st_size == 5000 and p.done == 5000
    p.restart("test")
    assert p.done == 0 and part.stat().st_size == 0
    add(p, DATA)
    assert p.mismatch() is None
    p.close()


def test_mismatch_says_size_or_hash(paths, tmp_path):
    part, side = paths
    p = PartialFile(part, side, source())
    p.open()
    add(p, DATA[:100])
    assert p.mismatch() == f"size 100 instead of {len(DATA)}"
    add(p, bytes(len(DATA) - 100))
    assert p.mismatch().startswith("sha256 ") and SHA[:12] in p.mismatch()
    target = tmp_path / "q"
    p.move_to(target)
    assert target.stat().st_size == len(DATA) and not part.exists() and not side.exists()
    p.close()
    assert p.open() is False and p.done == 0  # the hash state went with the bad bytes
    p.discard()
    assert not part.exists() and not side.exists()
