"""The single-file downloader against the fake Hub: resume, restart, ETag change, integrity, disk full, faults."""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from collections import namedtuple

import pytest

from app.core.downloads import downloader as dlmod
from app.core.downloads import partial as partialmod
from app.core.downloads.errors import (
    AccessError,
    DiskFullError,
    DownloadCancelled,
    DownloadPaused,
    IntegrityError,
    NetworkError,
    RemoteChangedError,
)
from app.core.downloads.progress import Reporting
from app.core.downloads.spec import Controls
from tests.core.downloads.conftest import REPO, fast, gets
from tests.fakehub import Fault

SIZE = 1 << 20


def files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_plain_download_verifies_and_leaves_only_the_file(fake_hub, repo, make_dl, models_dir, client):
    seen = []
    dest = make_dl(reporting=Reporting(lambda d, t, r: seen.append((d, t, r)))).run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == repo.snapshot("main").files["m.gguf"].sha256
    assert files_under(models_dir) == [f"{REPO}/m.gguf"]
    assert seen[-1][:2] == (SIZE, SIZE)
    small = make_dl("config.json").run(client)  # non-LFS: verified by git blob sha1
    assert small.read_bytes() == b'{"model_type": "llama"}'


def test_t9_drop_at_half_resumes_with_range_and_if_range(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", Fault.drop(SIZE // 2))
    dl = make_dl()
    dest = dl.run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == repo.snapshot("main").files["m.gguf"].sha256
    first, second = gets(fake_hub)
    assert first.range is None and first.bytes_sent == SIZE // 2
    assert second.status == 206 and second.range == f"bytes={SIZE // 2}-"
    assert second.if_range == f'"{repo.snapshot("main").files["m.gguf"].etag}"'
    sent = first.bytes_sent + second.bytes_sent
    assert SIZE <= sent <= SIZE * 1.01
    assert dl.bytes_received == sent


def test_t9_resume_across_restarts_rehashes_the_prefix(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", Fault.drop(SIZE // 3))
    with pytest.raises(NetworkError):
        make_dl(options=fast(max_retries=0)).run(client)
    part = make_dl().part
    assert part.stat().st_size == SIZE // 3 and part.with_name("m.gguf.part.json").exists()
    dl = make_dl()  # a fresh object: nothing in memory, as after an app restart
    dl.run(client)
    assert gets(fake_hub)[-1].range == f"bytes={SIZE // 3}-"
    assert dl.bytes_received == SIZE - SIZE // 3
    assert not part.exists()


def test_t9_server_ignoring_range_restarts_cleanly(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", Fault.drop(SIZE // 2), Fault.ignore_range())
    dest = make_dl().run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == repo.snapshot("main").files["m.gguf"].sha256
    second = gets(fake_hub)[1]
    assert second.range is not None and second.status == 200 and second.bytes_sent == SIZE


def test_t10_etag_change_discards_the_partial(fake_hub, repo, make_dl, client):
    old = repo.snapshot("main").files["m.gguf"]
    fake_hub.faults.add("m.gguf", Fault.drop(SIZE // 2), Fault.change_etag())
    dl = make_dl()
    with pytest.raises(RemoteChangedError, match="changed on the Hub"):
        dl.run(client)
    assert not dl.part.exists() and not dl.sidecar_path.exists() and not dl.dest.exists()
    new = repo.snapshot("main").files["m.gguf"]
    assert new.sha256 != old.sha256
    fake_hub.clear_log()
    dest = make_dl(sha256=new.sha256, commit=repo.snapshot("main").commit).run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == new.sha256
    (only,) = gets(fake_hub)
    assert only.range is None and only.bytes_sent == SIZE


def test_t11_flipped_byte_is_quarantined_never_placed(fake_hub, repo, make_dl, models_dir, client):
    fake_hub.faults.add("m.gguf", Fault.flip(1234))
    dl = make_dl()
    with pytest.raises(IntegrityError, match="quarantine") as info:
        dl.run(client)
    assert not dl.dest.exists() and not dl.part.exists()
    q = list((models_dir / "quarantine").iterdir())
    assert len(q) == 1 and str(q[0]) == info.value.quarantined and not q[0].name.endswith(".gguf")
    assert make_dl().run(client).exists()  # fault gone: a retry succeeds


def test_t12_precheck_too_little_space_creates_nothing(fake_hub, repo, make_dl, models_dir, monkeypatch, client):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(dlmod.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 5000, 5000))
    with pytest.raises(DiskFullError) as info:
        make_dl().run(client)
    assert info.value.free == 5000 and info.value.needed >= SIZE and not info.value.partial_kept
    assert "needed" in str(info.value) and list(models_dir.iterdir()) == []
    assert gets(fake_hub) == []


def full_disk_after(limit: int, monkeypatch):
    """Make the partial's writes fail with ENOSPC once `limit` bytes are in the file; returns a switch."""
    real = partialmod.write_at
    state = {"full": True}

    def write_at(fd, data, offset):
        if state["full"] and offset + len(data) > limit:
            if offset >= limit:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data[: limit - offset], offset)
        return real(fd, data, offset)

    monkeypatch.setattr(partialmod, "write_at", write_at)
    return state


def test_t12_disk_full_mid_download_keeps_the_partial_then_resumes(fake_hub, repo, make_dl, monkeypatch, client):
    switch = full_disk_after(300_000, monkeypatch)
    dl = make_dl()
    with pytest.raises(DiskFullError, match="kept") as info:
        dl.run(client)
    assert info.value.partial_kept and dl.part.stat().st_size == 300_000 and not dl.dest.exists()
    switch["full"] = False  # space freed
    dest = make_dl().run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == repo.snapshot("main").files["m.gguf"].sha256
    assert gets(fake_hub)[-1].range == "bytes=300000-"


def test_stall_is_retried_after_the_stall_timeout(fake_hub, repo, make_dl, client):
    stall = fake_hub.faults.add("m.gguf", Fault.stall(SIZE // 4))
    t0 = time.monotonic()
    dest = make_dl(options=fast(stall_timeout_s=0.5)).run(client)
    took = time.monotonic() - t0
    stall.release()
    assert dest.exists() and 0.5 <= took < 5
    assert gets(fake_hub)[-1].range == f"bytes={SIZE // 4}-"


def test_503_with_retry_after_is_waited_for(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", Fault.status_code(503, retry_after=1))
    t0 = time.monotonic()
    make_dl().run(client)
    assert time.monotonic() - t0 >= 1.0
    assert [r.status for r in gets(fake_hub)] == [503, 200]


def test_429_retried_and_retries_are_bounded(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", *[Fault.status_code(500) for _ in range(3)])
    with pytest.raises(NetworkError, match="500"):
        make_dl(options=fast(max_retries=2)).run(client)
    assert len(gets(fake_hub)) == 3


def test_gated_is_an_access_error_not_retried(fake_hub, repo, make_dl, client):
    repo.gated = "auto"
    with pytest.raises(AccessError, match="licence"):
        make_dl().run(client)
    assert len(gets(fake_hub)) == 1


def test_cancel_during_a_stall_returns_fast_and_deletes_the_partial(fake_hub, repo, make_dl, client):
    stall = fake_hub.faults.add("m.gguf", Fault.stall(SIZE // 4))
    cancel = threading.Event()
    dl = make_dl(controls=Controls(cancel=cancel), options=fast(stall_timeout_s=60))
    result = {}

    def go():
        try:
            dl.run(client)
        except Exception as exc:
            result["exc"] = exc

    t = threading.Thread(target=go)
    t.start()
    assert stall.triggered.wait(5)
    time.sleep(0.3)
    t0 = time.monotonic()
    cancel.set()
    t.join(5)
    stall.release()
    assert time.monotonic() - t0 < 1.0
    assert isinstance(result.get("exc"), DownloadCancelled)
    assert not dl.part.exists() and not dl.sidecar_path.exists() and not dl.dest.exists()


def test_pause_then_resume_completes_with_a_range_request(fake_hub, repo, make_dl, client):
    fake_hub.faults.add("m.gguf", Fault.throttle(SIZE))  # ~1 s for the whole file
    pause = threading.Event()
    dl = make_dl(controls=Controls(pause=pause))
    threading.Timer(0.3, pause.set).start()
    with pytest.raises(DownloadPaused):
        dl.run(client)
    kept = dl.part.stat().st_size
    assert 0 < kept < SIZE
    pause.clear()
    dest = dl.run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == repo.snapshot("main").files["m.gguf"].sha256
    assert gets(fake_hub)[-1].range == f"bytes={kept}-"
    assert dl.prefix_rehash_s == 0.0  # same object: the hash state in memory was reused
