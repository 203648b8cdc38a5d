"""A host over the FakeEngine (fast, deterministic token counts) and a tiny workload for the bench tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.bench.workload import Workload
from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from tests.fixtures.fake_engine import registry_with_fake


@pytest.fixture
def fake_host() -> Iterator[EngineHost]:
    host = EngineHost(registry_with_fake(tok_s=400), queue_size=8, name="test-bench-host")
    yield host
    assert host.shutdown(5)


@pytest.fixture
def fake_model(tmp_path: Path) -> Path:
    path = tmp_path / "model.fake"
    path.write_bytes(b"fake weights")
    return path


def fake_load(path: Path, workload: Workload) -> LoadSpec:
    return LoadSpec(path=path, n_ctx=workload.target_ctx)


TINY = Workload(prompt_lens=[40, 80], gen_len=6, concurrency=[1, 3], runs=2, warmup=1, shared_prefix=30)
