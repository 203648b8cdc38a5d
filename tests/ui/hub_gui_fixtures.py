"""Shared setup for the Hub / Downloads / My Models GUI tests: pages wired as the app wires them, on a fake Hub."""

from __future__ import annotations

import hashlib
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "models"))

from synthetic import GiB, profile

from app.core.downloads.manager import DownloadManager
from app.core.hub.client import HubClient
from app.core.library import Library
from app.core.models.devices import machine_from_profile
from app.ui.tasks import TaskRunner

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05, "stall_timeout_s": 5.0, "max_retries": 2}


def blob(n: int, seed: int = 1) -> bytes:
    return hashlib.shake_256(str(seed).encode()).digest(n)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def pool_tasks(qtbot):
    pool = ThreadPoolExecutor(4, thread_name_prefix="test-bg")
    tasks = TaskRunner(pool)
    yield tasks
    tasks.close()
    pool.shutdown(wait=True)


@dataclass
class Env:
    hub_url: str
    models: Path
    state_file: Path
    library: Library
    tasks: TaskRunner

    def hub(self) -> HubClient:
        return HubClient(self.hub_url, None)

    def manager(self, **kw) -> DownloadManager:
        kw.setdefault("download_options", FAST)
        return DownloadManager(
            self.models,
            self.state_file,
            endpoint=self.hub_url,
            client_factory=lambda: httpx.Client(trust_env=False, follow_redirects=True),
            **kw,
        )


@pytest.fixture
def env(fake_hub, hf_env, tmp_path, pool_tasks):
    models = tmp_path / "models"
    models.mkdir()
    library = Library(models, tmp_path / "library.db")
    yield Env(fake_hub.url, models, tmp_path / "downloads.json", library, pool_tasks)
    library.close()


@pytest.fixture
def machine():
    return machine_from_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))


def part_of(models: Path, repo_id: str, path: str) -> Path:
    return models / repo_id / (path + ".part")


__all__ = ["FAST", "Env", "GiB", "blob", "env", "machine", "part_of", "pool_tasks", "profile", "sha"]
