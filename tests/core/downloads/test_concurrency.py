"""T13 (kill -9 mid-download, then resume) and T14 (one file requested twice: threads and processes)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.core.downloads.writer import WRITE_CHUNK
from tests.core.downloads.conftest import REPO, blob, gets
from tests.fakehub import FakeRepo, Fault

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def spawn(hub, models_dir, f) -> subprocess.Popen:
    args = [hub.resolve_url(REPO, f.path), str(models_dir / REPO / f.path), str(models_dir), str(f.size), f.sha256]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.core.downloads.child", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def big(fake_hub):
    repo = fake_hub.add_repo(FakeRepo(REPO, files={"big.gguf": blob(3 * WRITE_CHUNK)}))
    return repo.snapshot("main").files["big.gguf"]


def test_t13_kill_9_then_relaunch_resumes_from_the_partial(fake_hub, big, models_dir, make_dl, client):
    fake_hub.faults.add("big.gguf", Fault.throttle(big.size // 2))  # ~2 s for the whole file
    dest = models_dir / REPO / "big.gguf"
    part = dest.with_name("big.gguf.part")
    proc = spawn(fake_hub, models_dir, big)
    deadline = time.monotonic() + 20
    while not (part.exists() and part.stat().st_size >= WRITE_CHUNK) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()  # SIGKILL: no cleanup of any kind
    proc.wait(10)
    kept = part.stat().st_size
    assert WRITE_CHUNK <= kept < big.size and not dest.exists()
    dl = make_dl("big.gguf")
    dl.run(client)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == big.sha256
    last = gets(fake_hub, "big.gguf")[-1]
    assert last.range == f"bytes={kept}-" and last.status == 206 and last.bytes_sent == big.size - kept
    assert sorted(p.name for p in dest.parent.iterdir()) == ["big.gguf"]


def test_t14_two_threads_one_download(fake_hub, big, make_dl, client):
    fake_hub.faults.add("big.gguf", Fault.throttle(big.size * 2))  # ~0.5 s: the second asks meanwhile
    results, errors = [], []

    def go():
        try:
            results.append(make_dl("big.gguf").run(client))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(20)
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    assert hashlib.sha256(results[0].read_bytes()).hexdigest() == big.sha256
    (only,) = gets(fake_hub, "big.gguf")
    assert only.bytes_sent == big.size


def test_t14_two_processes_one_download(fake_hub, big, models_dir):
    fake_hub.faults.add("big.gguf", Fault.throttle(big.size))  # ~1 s
    procs = [spawn(fake_hub, models_dir, big)]
    time.sleep(0.5)
    procs.append(spawn(fake_hub, models_dir, big))
    for p in procs:
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err.decode()
    dest = models_dir / REPO / "big.gguf"
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == big.sha256
    (only,) = gets(fake_hub, "big.gguf")
    assert only.bytes_sent == big.size
    assert sorted(p.name for p in dest.parent.iterdir()) == ["big.gguf"]
