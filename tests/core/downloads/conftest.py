"""Helpers for download tests: a repo on the fake Hub and a downloader bound to it, no proxies."""

from __future__ import annotations

import hashlib
import os

import httpx
import pytest

from app.core.downloads.downloader import FileDownload
from tests.fakehub import FakeRepo

REPO = "org/dl"
FAST = {"backoff_s": 0.02, "backoff_max_s": 0.1, "stall_timeout_s": 5.0}


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
def make_dl(fake_hub, models_dir, client):
    """`make_dl(path="m.gguf", **overrides)` → a FileDownload of that file of `org/dl` into models_dir."""

    def make(path: str = "m.gguf", repo_id: str = REPO, **kw) -> FileDownload:
        f = fake_hub.repos[repo_id].snapshot("main").files[path]
        args = dict(expected_size=f.size, commit=fake_hub.repos[repo_id].snapshot("main").commit,
                    repo_id=repo_id, path=path, root=models_dir, client=client, **FAST)
        if f.is_lfs:
            args["expected_sha256"] = f.sha256
        else:
            args["expected_git_sha1"] = f.etag
        args.update(kw)
        return FileDownload(fake_hub.resolve_url(repo_id, path), models_dir / repo_id / path, **args)

    return make


def gets(hub, path: str = "m.gguf"):
    hub.wait_idle()
    return hub.requests("GET", path)
