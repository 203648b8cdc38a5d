"""Byte sources for the GGUF reader: a local file, bytes in memory, or anything with `read_at`.

The Hub client plugs in an HTTP Range source with the same two methods, so the
reader never needs the whole file.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO, Protocol, runtime_checkable

from app.core.models.errors import ModelFileError


@runtime_checkable
class ByteSource(Protocol):
    """Random-access bytes. `read_at` may return fewer than `n` bytes (end of file or
    a short chunk); the reader asks again from where it stopped. A source may also
    define `size() -> int | None` when it knows the total length."""

    def read_at(self, offset: int, n: int) -> bytes: ...


class FileSource:
    """A local file, opened on first read; use as a context manager or call `close()`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fh: BinaryIO | None = None

    def _handle(self) -> BinaryIO:
        if self._fh is None:
            self._fh = open(self.path, "rb")  # noqa: SIM115 (kept open across reads; close() closes it)
        return self._fh

    def read_at(self, offset: int, n: int) -> bytes:
        fh = self._handle()
        fh.seek(offset)
        return fh.read(n)

    def size(self) -> int:
        return os.fstat(self._handle().fileno()).st_size

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesSource:
    """Bytes already in memory (tests, the first chunk of a remote file)."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = bytes(data)

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0:
            return b""
        return self._data[offset : offset + n]

    def size(self) -> int:
        return len(self._data)


def source_size(source: object) -> int | None:
    """The length a source reports through an optional `size()` (or `size` attribute)."""
    size = getattr(source, "size", None)
    if callable(size):
        size = size()
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size
    return None


class Cursor:
    """Sequential reads over a ByteSource, fetched lazily in chunks and capped."""

    def __init__(self, source: ByteSource, file_size: int | None, chunk: int, cap: int, max_string: int) -> None:
        self.source = source
        self.file_size = file_size
        self.chunk = max(chunk, 4096)
        self.limit = cap if file_size is None else min(cap, file_size)
        self.cap = cap
        self.max_string = max_string
        self.buf = bytearray()
        self.base = 0  # absolute offset of buf[0]
        self.pos = 0
        self.bytes_read = 0

    def _check_room(self, n: int, what: str) -> None:
        end = self.pos + n
        if end > self.cap:
            raise ModelFileError(
                f"GGUF header too large: {what} at offset {self.pos} needs {n} bytes, "
                f"past the {_size_text(self.cap)} header cap"
            )
        if self.file_size is not None and end > self.file_size:
            raise ModelFileError(
                f"GGUF header is truncated: {what} at offset {self.pos} needs {n} bytes "
                f"but the file ends at {self.file_size} bytes"
            )

    def take(self, n: int, what: str) -> int:
        """Ensure n bytes at the cursor are buffered; advance; return their index in buf."""
        self._check_room(n, what)
        end = self.pos + n
        have = self.base + len(self.buf)
        if end > have:
            consumed = self.pos - self.base
            if consumed >= self.chunk:  # drop what was parsed so the buffer stays small
                del self.buf[:consumed]
                self.base = self.pos
            while have < end:
                want = min(max(end - have, self.chunk), self.limit - have)
                data = self.source.read_at(have, want)
                if not data:
                    raise ModelFileError(
                        f"GGUF header is truncated: {what} at offset {self.pos} needs {n} "
                        f"bytes but the file ends at {have} bytes"
                    )
                data = bytes(data[:want])
                self.buf += data
                self.bytes_read += len(data)
                have += len(data)
        index = self.pos - self.base
        self.pos = end
        return index

    def unpack(self, code: str, size: int, what: str) -> Any:
        return struct.unpack_from("<" + code, self.buf, self.take(size, what))[0]

    def unpack_many(self, code: str, size: int, n: int, what: str) -> list[Any]:
        return list(struct.unpack_from(f"<{n}{code}", self.buf, self.take(n * size, what)))

    def raw(self, n: int, what: str) -> bytes:
        i = self.take(n, what)
        return bytes(self.buf[i : i + n])

    def ensure_possible(self, n: int, what: str) -> None:
        """Fail early when n more bytes cannot exist, without reading them."""
        self._check_room(n, what)

    def string(self, what: str) -> str:
        length = self.unpack("Q", 8, f"length of {what}")
        if length > self.max_string:
            raise ModelFileError(f"{what} has length {length}, above the {_size_text(self.max_string)} string cap")
        return self.raw(length, what).decode("utf-8", errors="replace")


def _size_text(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n % mib == 0 else f"{n} bytes"
