"""The response body into the partial: received on the download's thread, written and hashed on a writer thread.

A full disk keeps exactly what was written (and hashed), so the download can resume from there once space is freed.
"""

from __future__ import annotations

import errno
import queue
import shutil
import threading
from collections.abc import Callable

from app.core.downloads.errors import DiskFullError
from app.core.downloads.partial import PartialFile

WRITE_CHUNK = 4 * 1024 * 1024  # one write + one hash update per 4 MiB: syscall and call overhead stay negligible
# Start writing dirty pages to disk every this many bytes, so the fsync at the end has little left to do.
WRITEBACK_EVERY = 64 * 1024 * 1024
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


class Writer:
    """Writes buffers on one thread and hashes them on another, so receiving, disk writes and sha256 all
    overlap (one thread doing both capped a loopback download near half of curl's speed here).

    Only these threads touch the partial until `close()` returns; its `done` counts what is both written and
    hashed.
    """

    def __init__(self, partial: PartialFile) -> None:
        self._partial = partial
        self._pos = partial.done  # where the next write lands; hashing may lag behind it
        self._flushed = self._pos  # writeback started up to here
        self._queue: queue.Queue[bytearray | None] = queue.Queue(maxsize=4)
        self._hashes: queue.Queue[memoryview | None] = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        name = partial.source.path
        self._thread = threading.Thread(target=self._run, name=f"writer:{name}", daemon=True)
        self._hasher = threading.Thread(target=self._hash, name=f"hasher:{name}", daemon=True)
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
        partial = self._partial
        while (data := self._hashes.get()) is not None:
            partial.hashed(data)

    def _flush(self, buf: bytearray) -> None:
        """Write `buf` at the partial's end and pass exactly what reached the file on to the hasher."""
        partial = self._partial
        view = memoryview(buf)
        written = 0
        try:
            while written < len(view):
                written += partial.write(view[written:], self._pos + written)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            if written:
                self._hashes.put(view[:written])
            self._hashes.put(None)  # let the hasher catch up: the kept partial must be fully hashed
            self._hasher.join()
            self._hasher = threading.Thread(target=lambda: None)  # close() joins something harmless
            self._hasher.start()
            partial.keep_hashed()
            needed = (partial.total or partial.done) - partial.done
            raise DiskFullError(
                partial.source.path, needed, shutil.disk_usage(partial.path.parent).free, partial_kept=True
            ) from None
        self._pos += written
        self._hashes.put(view)
        if self._pos - self._flushed >= WRITEBACK_EVERY:
            partial.start_writeback(self._flushed, self._pos - self._flushed)
            self._flushed = self._pos


def receive_body(response, partial: PartialFile, on_data: Callable[[int, int], None]) -> Exception | None:
    """Stream `response`'s raw body to the partial's end, calling `on_data(len(chunk), position)` on this
    thread for each chunk received. Returns the transport error that cut the body short, or None; what
    arrived before a break is written too. A write error (disk full) is raised."""
    import httpx

    writer = Writer(partial)
    buf, pos, broken = bytearray(), partial.done, None
    try:
        try:
            for chunk in response.iter_raw():
                pos += len(chunk)
                on_data(len(chunk), pos)
                buf += chunk
                if len(buf) >= WRITE_CHUNK:
                    writer.put(buf)
                    buf = bytearray()
        except httpx.TransportError as exc:
            broken = exc
        writer.put(buf)
    finally:
        writer.close()  # re-raises a write error (disk full) from the writer thread
    return broken
