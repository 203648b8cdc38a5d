"""DownloadManager: queue and parallelism, states with plain-words errors, progress, persistence across restarts."""

from __future__ import annotations

import hashlib
import json
from collections import namedtuple

import httpx
import pytest

from app.core.downloads import manager as mgrmod
from app.core.downloads.items import RemoteFile, State
from app.core.downloads.manager import DownloadManager
from tests.core.downloads.conftest import FAST, REPO, blob, gets
from tests.core.downloads.test_downloader import full_disk_after
from tests.fakehub import FakeRepo, Fault, gguf_repo

SIZE = 1 << 20


@pytest.fixture
def files(fake_hub):
    data = {
        "a.gguf": blob(SIZE, 1),
        "b.gguf": blob(SIZE, 2),
        "mmproj-f16.gguf": blob(1000, 3),
        "config.json": b'{"x": 1}',
    }
    repo = fake_hub.add_repo(FakeRepo(REPO, files=data))
    snap = repo.snapshot("main")

    def spec(path: str) -> RemoteFile:
        f = snap.files[path]
        return RemoteFile(path, f.size, f.sha256 if f.is_lfs else None, None if f.is_lfs else f.etag)

    spec.commit = snap.commit
    spec.data = data
    return spec


@pytest.fixture
def make_manager(fake_hub, models_dir, tmp_path):
    made = []

    def make(**kw) -> DownloadManager:
        kw.setdefault("client_factory", lambda: httpx.Client(trust_env=False, follow_redirects=True))
        kw.setdefault("download_options", FAST)
        m = DownloadManager(models_dir, tmp_path / "downloads.json", endpoint=fake_hub.url, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_variant_lands_whole_and_verified(files, make_manager, models_dir):
    m = make_manager()
    item_id = m.add_variant(
        REPO, [files("a.gguf"), files("mmproj-f16.gguf"), files("config.json")], commit=files.commit, label="A + mmproj"
    )
    assert m.wait(item_id, 20) == State.DONE
    for name in ("a.gguf", "mmproj-f16.gguf", "config.json"):
        assert (models_dir / REPO / name).read_bytes() == files.data[name]
    item = m.get(item_id)
    assert item.bytes_done == item.total and item.error == ""
    saved = json.loads(m.state_file.read_text())
    assert saved["items"][0]["state"] == "done"


def test_max_parallel_one_queues_the_second(fake_hub, files, make_manager):
    fake_hub.faults.add("a.gguf", Fault.throttle(SIZE * 2))
    m = make_manager(max_parallel=1)
    states = []
    m.changed.connect(lambda item: states.append((item.label, item.state)))
    first = m.add_variant(REPO, [files("a.gguf")], commit=files.commit, label="first")
    second = m.add_variant(REPO, [files("b.gguf")], commit=files.commit, label="second")
    assert m.get(first).state == State.ACTIVE and m.get(second).state == State.QUEUED
    assert m.wait(second, 20) == State.DONE and m.get(first).state == State.DONE
    assert states.index(("first", State.DONE)) < states.index(("second", State.ACTIVE))


def test_progress_has_rate_and_eta(fake_hub, files, make_manager):
    fake_hub.faults.add("a.gguf", Fault.throttle(SIZE))
    m = make_manager()
    events = []
    m.progress.connect(events.append)
    item_id = m.add_variant(REPO, [files("a.gguf"), files("b.gguf")], commit=files.commit)
    assert m.wait(item_id, 20) == State.DONE
    mid = [e for e in events if e.path == "a.gguf" and 0 < e.file_done < SIZE]
    assert mid and all(e.total == 2 * SIZE for e in events)
    assert any(e.rate > 0 and e.eta is not None and e.file_eta is not None for e in mid)
    assert any(e.rate > SIZE / 4 and e.eta > SIZE / e.rate for e in mid)  # item ETA counts the second file
    assert events[-1].done == 2 * SIZE


def test_restart_mid_download_resumes(fake_hub, files, make_manager, models_dir):
    fake_hub.faults.add("a.gguf", Fault.throttle(SIZE // 2))
    m1 = make_manager()
    got_some = []
    m1.progress.connect(lambda p: got_some.append(p.file_done))
    item_id = m1.add_variant(REPO, [files("a.gguf")], commit=files.commit)
    while not got_some or max(got_some) < SIZE // 4:
        m1.wait(item_id, 0.05)
    m1.close()  # the app quits mid-download
    part = models_dir / REPO / "a.gguf.part"
    kept = part.stat().st_size
    assert 0 < kept < SIZE
    m2 = make_manager()
    assert m2.get(item_id).state == State.PAUSED
    m2.resume_all()
    assert m2.wait(item_id, 20) == State.DONE
    assert sha(models_dir / REPO / "a.gguf") == hashlib.sha256(files.data["a.gguf"]).hexdigest()
    assert gets(fake_hub, "a.gguf")[-1].range == f"bytes={kept}-"


def test_t11_integrity_failure_then_retry(fake_hub, files, make_manager, models_dir):
    fake_hub.faults.add("a.gguf", Fault.flip(10))
    m = make_manager()
    item_id = m.add_file(REPO, files("a.gguf"), commit=files.commit)
    assert m.wait(item_id, 20) == State.FAILED
    assert "integrity check" in m.get(item_id).error and "quarantine" in m.get(item_id).error
    assert not (models_dir / REPO / "a.gguf").exists()
    m.resume(item_id)
    assert m.wait(item_id, 20) == State.DONE and m.get(item_id).error == ""


def test_t12_disk_full_mid_download_pauses_with_a_message(fake_hub, files, make_manager, models_dir, monkeypatch):
    switch = full_disk_after(200_000, monkeypatch)
    m = make_manager()
    item_id = m.add_file(REPO, files("a.gguf"), commit=files.commit)
    assert m.wait(item_id, 20) == State.PAUSED
    assert "disk filled up" in m.get(item_id).error
    switch["full"] = False
    m.resume(item_id)
    assert m.wait(item_id, 20) == State.DONE
    assert gets(fake_hub, "a.gguf")[-1].range == "bytes=200000-"


def test_t12_variant_precheck_fails_before_any_write(fake_hub, files, make_manager, models_dir, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(mgrmod.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    m = make_manager()
    item_id = m.add_variant(REPO, [files("a.gguf"), files("b.gguf")], commit=files.commit, label="A+B")
    assert m.wait(item_id, 20) == State.FAILED
    assert "Not enough disk space for A+B" in m.get(item_id).error
    assert gets(fake_hub, "") == [] and list(models_dir.rglob("*.part")) == []


def test_pause_resume_and_cancel(fake_hub, files, make_manager, models_dir):
    fake_hub.faults.add("a.gguf", Fault.throttle(SIZE // 2))
    m = make_manager()
    item_id = m.add_file(REPO, files("a.gguf"), commit=files.commit)
    while m.get(item_id).bytes_done < SIZE // 8:
        m.wait(item_id, 0.05)
    m.pause(item_id)
    assert m.wait(item_id, 5) == State.PAUSED
    part = models_dir / REPO / "a.gguf.part"
    assert part.exists()
    removed = []
    m.removed.connect(removed.append)
    m.cancel(item_id)
    assert removed == [item_id] and m.get(item_id) is None
    assert not part.exists() and not part.with_name("a.gguf.part.json").exists()
    assert json.loads(m.state_file.read_text())["items"] == []


def test_split_gguf_variant_from_a_generated_repo(fake_hub, make_manager, models_dir):
    repo = fake_hub.add_repo(gguf_repo("fake-org/Tiny-GGUF"))
    snap = repo.snapshot("main")
    shards = sorted(p for p in snap.files if p.startswith("Q8_0/"))
    specs = [RemoteFile(p, snap.files[p].size, snap.files[p].sha256) for p in shards]
    m = make_manager()
    item_id = m.add_variant(repo.repo_id, specs, commit=snap.commit, label="Q8_0")
    assert m.wait(item_id, 20) == State.DONE
    assert (
        sorted(p.relative_to(models_dir / repo.repo_id).as_posix() for p in (models_dir / repo.repo_id).rglob("*.gguf"))
        == shards
    )
