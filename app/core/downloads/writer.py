"""The response body into the partial: received on the download's thread, written and hashed on a writer thread.

A full disk keeps exactly what was written (and hashed), so the download can resume from there once space is freed.
"""

from __future__ import annotations

import errno
import os
import queue
import shutil
import threading
from typing import TYPE_CHECKING, Callable

from app.core.downloads.errors import DiskFullError
from app.core.downloads.response import Retry

if TYPE_CHECKING:
    from app.core.downloads.downloader import FileDownload

WRITE_CHUNK = 4 * 1024 * 1024  # one write + one hash update per 4 MiB: syscall and call overhead stay negligible
# Start writing dirty pages to disk every this many bytes, so the fsync at the end has little left to do.
WRITEBACK_EVERY = 64 * 1024 * 1024
WriteAt = Callable[[int, memoryview, int], int]


def write_at(fd: int, data: memoryview, offset: int) -> int:
    """One positioned write."""
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


class Writer:
    """Writes buffers on one thread and hashes them on another, so receiving, disk writes and sha256 all
    overlap (one thread doing both capped a loopback download near half of curl's speed here).

    Only these threads touch the partial and the hash state until `close()` returns; `_done` counts
    what is both written and hashed.
    """

    def __init__(self, download: FileDownload, fd: int, write: WriteAt = write_at) -> None:
        self._download, self._fd, self._write = download, fd, write
        self._pos = download._done  # where the next write lands; hashing may lag behind it
        self._flushed = self._pos  # writeback started up to here
        self._queue: queue.Queue[bytearray | None] = queue.Queue(maxsize=4)
        self._hashes: queue.Queue[memoryview | None] = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer:{download.path}", daemon=True)
        self._hasher = threading.Thread(target=self._hash, name=f"hasher:{download.path}", daemon=True)
        self._thread.start()
        self._hasher.start()

    def put(self, buf: bytearray) -> None:
        """`buf` is handed over: the caller must not touch it again."""
        if self.error is not None:
            raise self.error
        if buf:
            self._queue.put(buf)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._hasher.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (buf := self._queue.get()) is not None:
            if self.error is None:  # after a failure, drain without writing so `put` never blocks
                try:
                    self._flush(buf)
                except BaseException as exc:  # handed to the receiving thread
                    self.error = exc
        self._hashes.put(None)

    def _hash(self) -> None:
        dl = self._download
        while (data := self._hashes.get()) is not None:
            dl._hasher.update(data)
            dl._done += len(data)

    def _flush(self, buf: bytearray) -> None:
        """Write `buf` at the partial's end and pass exactly what reached the file on to the hasher."""
        dl, fd = self._download, self._fd
        view = memoryview(buf)
        written = 0
        try:
            while written < len(view):
                written += self._write(fd, view[written:], self._pos + written)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                raise
            if written:
                self._hashes.put(view[:written])
            self._hashes.put(None)  # let the hasher catch up: the kept partial must be fully hashed
            self._hasher.join()
            self._hasher = threading.Thread(target=lambda: None)  # close() joins something harmless
            self._hasher.start()
            os.ftruncate(fd, dl._done)
            dl._remember_hash_state(fd)
            needed = (dl._total or dl._done) - dl._done
            raise DiskFullError(dl.path, needed, shutil.disk_usage(dl.dest.parent).free,
                                partial_kept=True) from None
        self._pos += written
        self._hashes.put(view)
        if self._pos - self._flushed >= WRITEBACK_EVERY:
            start_writeback(fd, self._flushed, self._pos - self._flushed)
            self._flushed = self._pos


def receive_body(dl: FileDownload, response, fd: int, write: WriteAt = write_at) -> None:
    """Stream `response`'s body to the partial's end; a break or a short body raises `Retry` (or stops)."""
    import httpx

    writer = Writer(dl, fd, write)
    buf, pos, broken = bytearray(), dl._done, None
    try:
        try:
            for chunk in response.iter_raw():
                dl._watch.touch()
                dl.bytes_received += len(chunk)
                pos += len(chunk)
                buf += chunk
                if len(buf) >= WRITE_CHUNK:
                    writer.put(buf)
                    buf = bytearray()
                dl._emit(pos)
        except httpx.TransportError as exc:
            broken = exc  # what arrived before the break is good: write it, then retry from there
        writer.put(buf)
    finally:
        writer.close()  # re-raises a write error (disk full) from the writer thread
    if broken is not None:
        dl._interrupted(broken)
    if dl._total is not None and dl._done < dl._total:
        dl._raise_if_stopped()
        raise Retry(f"connection closed at {dl._done} of {dl._total} bytes")
