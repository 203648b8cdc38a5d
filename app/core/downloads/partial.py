"""The on-disk state of an unfinished download: `.part` bytes, a JSON sidecar, and hashing helpers."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)
_READ_CHUNK = 4 * 1024 * 1024


@dataclass
class Sidecar:
    """What a `.part` file holds; a partial is resumed only if path, size and hash all match."""

    url: str
    repo: str
    commit: str
    path: str
    size: int | None
    sha256: str | None
    git_sha1: str | None
    etag: str | None = None
    version: int = 1

    def same_content(self, other: "Sidecar") -> bool:
        keys = ("path", "size", "sha256", "git_sha1")  # the content, wherever it came from
        return all(getattr(self, k) == getattr(other, k) for k in keys)

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> "Sidecar | None":
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(**{k: raw.get(k) for k in cls.__dataclass_fields__ if k in raw})
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            logger.warning("unreadable download sidecar %s; the partial will be discarded", path)
            return None


def new_hasher(sha256: str | None, size: int | None):
    """sha256 for LFS files; the git blob sha1 (`sha1(b"blob <size>\\0" + data)`) for small non-LFS ones."""
    if sha256:
        return hashlib.sha256()
    if size is None:
        raise ValueError("a git sha1 needs the file size up front")
    return hashlib.sha1(b"blob %d\0" % size)


def _pread(fd: int, n: int, pos: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, pos)
    os.lseek(fd, pos, os.SEEK_SET)
    return os.read(fd, n)


def hash_prefix(fd: int, hasher, length: int) -> float:
    """Feed the first `length` bytes of `fd` to `hasher`; returns the seconds it took (re-hash cost on resume)."""
    t0 = time.perf_counter()
    pos = 0
    while pos < length:
        data = _pread(fd, min(_READ_CHUNK, length - pos), pos)
        if not data:
            raise OSError(f"partial file shorter than expected ({pos} of {length} bytes)")
        hasher.update(data)
        pos += len(data)
    return time.perf_counter() - t0


def hash_file(path: Path, sha256: str | None) -> str:
    """Hex digest of a whole file with the same algorithm the download verifies with."""
    size = os.path.getsize(path)
    hasher = new_hasher(sha256, size)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        hash_prefix(fd, hasher, size)
    finally:
        os.close(fd)
    return hasher.hexdigest()


class RateMeter:
    """Bytes per second over the last few seconds, so a stall shows as a falling rate, not a frozen one."""

    def __init__(self, window_s: float = 3.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, total_bytes: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._samples.append((now, total_bytes))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        t0, b0 = self._samples[0]
        return (total_bytes - b0) / (now - t0) if now > t0 else 0.0

    def reset(self) -> None:
        self._samples.clear()
