"""An unfinished download on disk: the `.part` bytes, the JSON sidecar that says what they are, and their hash.

`PartialFile` owns all three for one download; the hashing helpers also verify files already in place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text, fsync_dir
from app.core.downloads.paths import open_nofollow
from app.core.downloads.spec import Source

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

    def same_content(self, other: Sidecar) -> bool:
        keys = ("path", "size", "sha256", "git_sha1")  # the content, wherever it came from
        return all(getattr(self, k) == getattr(other, k) for k in keys)

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> Sidecar | None:
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


def partial_paths(dest: Path) -> tuple[Path, Path]:
    """Where the unfinished bytes of `dest` and their sidecar live, next to it."""
    return dest.with_name(dest.name + ".part"), dest.with_name(dest.name + ".part.json")


def write_at(fd: int, data: memoryview, offset: int) -> int:
    """One positioned write; returns how many bytes reached the file."""
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to begin writing a range to disk now, without waiting (Linux starts writeback on
    POSIX_FADV_DONTNEED); elsewhere this is a no-op and the final fsync does all the work."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


@dataclass(frozen=True)
class PartialState:
    """What a ranged request is judged against: bytes kept (written and hashed), size once known, ETag."""

    done: int
    total: int | None
    etag: str | None


class PartialFile:
    """`<dest>.part`, its sidecar, and the hash of the bytes in it so far, for one `Source`.

    Threads: the download's thread opens, restarts and closes it. While a `Writer` runs, the writer thread
    calls `write`, `start_writeback` and `keep_hashed`, the hasher thread `hashed`, and no one else touches
    it until the writer is closed. Kept across runs (pause → resume), it keeps the hash state in memory.
    """

    def __init__(self, path: Path, sidecar_path: Path, source: Source) -> None:
        self.path, self.sidecar_path, self.source = Path(path), Path(sidecar_path), source
        self._fd = -1
        self._hasher: Any = None  # a hashlib object once the algorithm can start
        self._hashed_id: tuple | None = None  # (ino, size, mtime) of the file the in-memory hash covers
        self._done = 0
        self._total: int | None = source.size
        self._side = self._wanted()

    @property
    def done(self) -> int:
        """Bytes written and hashed."""
        return self._done

    @property
    def total(self) -> int | None:
        return self._total

    @property
    def etag(self) -> str | None:
        return self._side.etag

    def state(self) -> PartialState:
        return PartialState(self._done, self._total, self.etag)

    # ---- open / resume ----

    def open(self) -> bool:
        """Open (or create) the partial, keeping its bytes only if the sidecar describes the same content.
        True when those bytes must be re-hashed with `rehash()`: in-memory hash state from a pause in this
        process is reused only while the file is exactly as it was left."""
        src = self.source
        self._fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        want = self._wanted()
        have = Sidecar.load(self.sidecar_path)
        size = os.fstat(self._fd).st_size
        if have is None or not have.same_content(want) or (size and have.size is None):
            if size:
                logger.info("discarding a partial of %s that belongs to another version", src.path)
            os.ftruncate(self._fd, 0)
            size, have = 0, want
        self._side, self._done, self._total = have, size, have.size
        self._side.url, self._side.commit = src.url, src.commit  # the same content, maybe from a newer commit
        self._side.save(self.sidecar_path)
        if self._hasher is not None and self._hashed_id == self._file_id():
            return False
        self._hasher = self._new_hasher()
        return size > 0

    def rehash(self) -> float:
        """Hash the kept prefix (after a restart of the app); returns the seconds it took."""
        took = hash_prefix(self._fd, self._hasher, self._done)
        logger.info("resuming %s at %d bytes; re-hashing the partial took %.2f s", self.source.path, self._done, took)
        return took

    def restart(self, why: str) -> None:
        """Drop every byte: the next request starts from zero."""
        logger.info("restarting %s from zero: %s", self.source.path, why)
        os.ftruncate(self._fd, 0)
        self._done = 0
        self._hasher = self._new_hasher()

    def learn(self, total: int | None, etag: str | None) -> None:
        """The size a response revealed (kept only if it was unknown) and the file's current ETag."""
        changed = False
        if total is not None and self._total is None:
            self._total = self._side.size = total
            changed = True
            if self._hasher is None:
                self._hasher = new_hasher(self.source.sha256, total)
        if etag != self._side.etag:
            self._side.etag = etag
            changed = True
        if changed:
            self._side.save(self.sidecar_path)

    # ---- the writer's side ----

    def write(self, data: memoryview, offset: int) -> int:
        """Writer thread: one positioned write; returns how many bytes reached the file."""
        return write_at(self._fd, data, offset)

    def start_writeback(self, offset: int, length: int) -> None:
        """Writer thread."""
        start_writeback(self._fd, offset, length)

    def hashed(self, data: memoryview) -> None:
        """Hasher thread: `data` is in the file at offset `done`; count it as kept."""
        self._hasher.update(data)
        self._done += len(data)

    def keep_hashed(self) -> None:
        """Writer thread, after a failed write with the hasher caught up: cut the file to what was hashed,
        so a resume (in this process or after a restart) continues from exactly there."""
        os.ftruncate(self._fd, self._done)
        self._remember_hash_state()

    # ---- the end ----

    def mismatch(self) -> str | None:
        """Why the bytes are not the file the Hub published, or None when size and hash match."""
        digest = self._hasher.hexdigest() if self._hasher is not None else ""
        expected = self.source.digest
        if self._total is not None and self._done != self._total:
            return f"size {self._done} instead of {self._total}"
        if digest != expected:
            return f"{self.source.algorithm} {digest[:12]}… instead of {expected[:12]}…"
        return None

    def finish(self, dest: Path) -> None:
        """Durably move the verified partial to `dest` and drop its sidecar."""
        os.fsync(self._fd)
        self._close_fd()
        os.replace(self.path, dest)
        fsync_dir(dest.parent)
        self.sidecar_path.unlink(missing_ok=True)

    def move_to(self, target: Path) -> None:
        """Move the partial away as it is (to quarantine) and drop its sidecar; the next run starts from zero."""
        os.fsync(self._fd)
        self._close_fd()
        self._hasher = None
        os.replace(self.path, target)
        self.sidecar_path.unlink(missing_ok=True)

    def discard(self) -> None:
        """Delete the partial and its sidecar (cancelled, or the remote file changed)."""
        self._close_fd()
        self.path.unlink(missing_ok=True)
        self.sidecar_path.unlink(missing_ok=True)
        self._hasher, self._done = None, 0

    def close(self) -> None:
        """Close the file, remembering which file the in-memory hash state covers (for a resume)."""
        if self._fd >= 0:
            self._remember_hash_state()
            self._close_fd()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _wanted(self) -> Sidecar:
        src = self.source
        return Sidecar(src.url, src.repo_id, src.commit, src.path, src.size, src.sha256, src.git_sha1)

    def _new_hasher(self) -> Any:
        if self._total is None and not self.source.sha256:
            return None  # a git sha1 covers the size: it starts once a response tells the size
        return new_hasher(self.source.sha256, self._total)

    def _file_id(self) -> tuple:
        st = os.fstat(self._fd)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _remember_hash_state(self) -> None:
        self._hashed_id = self._file_id() if self._hasher is not None else None
