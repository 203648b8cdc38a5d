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
WriteAt = Callable[[int, memoryview, int], int]


def write_at(fd: int, data: memoryview, offset: int) -> int:
    """One positioned write."""
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


class Writer:
    """Writes and hashes buffers on its own thread, so receiving the next bytes overlaps disk and sha256 work.

    Only this thread touches the partial and the hash state until `close()` returns.
    """

    def __init__(self, download: FileDownload, fd: int, write: WriteAt = write_at) -> None:
        self._download, self._fd, self._write = download, fd, write
        self._queue: queue.Queue[bytearray | None] = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"writer:{download.path}", daemon=True)
        self._thread.start()

    def put(self, buf: bytearray) -> None:
        if self.error is not None:
            raise self.error
        if buf:
            self._queue.put(buf)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (buf := self._queue.get()) is not None:
            if self.error is None:  # after a failure, drain without writing so `put` never blocks
                try:
                    self._flush(buf)
                except BaseException as exc:  # handed to the receiving thread
                    self.error = exc

    def _flush(self, buf: bytearray) -> None:
        """Write `buf` at the partial's end, hash exactly what reached the file, empty `buf`."""
        dl, fd = self._download, self._fd
        written = 0
        with memoryview(buf) as view:
            try:
                while written < len(view):
                    written += self._write(fd, view[written:], dl._done + written)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                    raise
                self._account(view[:written])
                os.ftruncate(fd, dl._done)
                dl._remember_hash_state(fd)
                needed = (dl._total or dl._done) - dl._done
                raise DiskFullError(dl.path, needed, shutil.disk_usage(dl.dest.parent).free,
                                    partial_kept=True) from None
            self._account(view[:written])
        buf.clear()

    def _account(self, data: memoryview) -> None:
        if len(data):
            self._download._hasher.update(data)
            self._download._done += len(data)


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
