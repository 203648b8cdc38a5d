"""Helpers for download tests: a repo on the fake Hub and a downloader bound to it, no proxies."""

from __future__ import annotations

import hashlib
import os

import httpx
import pytest

from app.core.downloads.downloader import FileDownload
from app.core.downloads.spec import DownloadOptions, Source, Target
from tests.fakehub import FakeRepo

REPO = "org/dl"
FAST_KEYS = {"backoff_s": 0.02, "backoff_max_s": 0.1, "stall_timeout_s": 5.0}
FAST = DownloadOptions.of(FAST_KEYS)


def fast(**changes) -> DownloadOptions:
    """FAST with some flat keys changed, e.g. `fast(max_retries=0)`."""
    return DownloadOptions.of({**FAST_KEYS, **changes})


def blob(n: int, seed: int = 1) -> bytes:
    """Deterministic bytes where every offset is distinguishable."""
    return hashlib.shake_256(str(seed).encode()).digest(n) if n <= 1 << 20 else os.urandom(n)


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    d.mkdir()
    return d


@pytest.fixture
def client():
    with httpx.Client(trust_env=False, follow_redirects=True) as c:
        yield c


@pytest.fixture
def repo(fake_hub):
    data = blob(1 << 20)
    return fake_hub.add_repo(FakeRepo(REPO, files={"m.gguf": data, "config.json": b'{"model_type": "llama"}'}))


@pytest.fixture
def make_dl(fake_hub, models_dir):
    """`make_dl(path="m.gguf", *, options=FAST, controls=, reporting=, **source_changes)` → a FileDownload of
    that file of `org/dl` into models_dir; run it with the `client` fixture (no proxies)."""

    def make(
        path: str = "m.gguf",
        repo_id: str = REPO,
        *,
        options: DownloadOptions = FAST,
        controls=None,
        reporting=None,
        **source_changes,
    ) -> FileDownload:
        snap = fake_hub.repos[repo_id].snapshot("main")
        f = snap.files[path]
        source = dict(
            url=fake_hub.resolve_url(repo_id, path),
            path=path,
            size=f.size,
            repo_id=repo_id,
            commit=snap.commit,
            sha256=f.sha256 if f.is_lfs else None,
            git_sha1=None if f.is_lfs else f.etag,
        )
        return FileDownload(
            Source(**{**source, **source_changes}),
            Target(models_dir / repo_id / path, models_dir),
            options=options,
            controls=controls,
            reporting=reporting,
        )

    return make


def gets(hub, path: str = "m.gguf"):
    hub.wait_idle()
    return hub.requests("GET", path)
