from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.core.library import Library


@pytest.fixture
def library(tmp_path) -> Library:
    lib = Library(tmp_path / "models", tmp_path / "data" / "library.db")
    (tmp_path / "models").mkdir(exist_ok=True)
    yield lib
    lib.close()


@pytest.fixture
def gguf_copy(tiny_gguf_f16: Path, tmp_path):
    """Copy the session's tiny valid GGUF to `dest` (a path under tmp_path)."""

    def copy(dest: Path) -> Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tiny_gguf_f16, dest)
        return dest

    return copy


def write_split_set(folder: Path, stem: str = "Tiny-Q8_0", n: int = 3) -> list[Path]:
    from tests.fakehub import default_gguf

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(1, n + 1):
        p = folder / f"{stem}-{i:05d}-of-{n:05d}.gguf"
        p.write_bytes(default_gguf("Q8_0", i - 1, n))
        paths.append(p)
    return paths
