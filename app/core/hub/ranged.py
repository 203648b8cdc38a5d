"""Model headers over HTTP: a Range-reading ByteSource, so a GGUF or safetensors header is read
without downloading the weights (the way huggingface.js and gguf-parser-go do it), and small JSON files.

httpx is imported lazily: without it remote metadata is unavailable, nothing else breaks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.core.models.errors import ModelFileError
from app.core.models.gguf import GGUFHeader, read_gguf_header

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_MAX_BYTES",
    "HttpRangeSource",
    "new_http_client",
    "read_remote_gguf",
    "read_remote_gguf_split",
]

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_CHUNK_BYTES = 2 * MiB
DEFAULT_MAX_BYTES = 64 * MiB
DEFAULT_TIMEOUT = 30.0
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$", re.IGNORECASE)


def _size_text(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


def _status_error(url: str, status: int) -> ModelFileError:
    if status in (401, 403):
        why = "access denied (a gated or private repo needs an accepted licence and a token)"
    elif status == 404:
        why = "not found"
    elif status == 429:
        why = "too many requests; try again later"
    elif status >= 500:
        why = "the server failed"
    else:
        why = "unexpected answer"
    return ModelFileError(f"cannot read {url}: {why} (HTTP {status})")


def new_http_client(timeout: float = DEFAULT_TIMEOUT) -> httpx.Client:
    """An httpx client that follows redirects (the Hub sends file bodies from a CDN)."""
    try:
        import httpx
    except ImportError as exc:  # optional: remote metadata needs it
        raise ModelFileError("reading model files over HTTP needs the httpx package") from exc
    return httpx.Client(follow_redirects=True, timeout=timeout)


class HttpRangeSource:
    """Random access to a remote file with `Range: bytes=a-b` GETs, in cached chunks.

    Reads are rounded out to whole `chunk_size` chunks, so the many small reads of a header
    parser cost a few requests. At most `max_bytes` are ever fetched. A server that answers a
    Range request with the whole file is refused without reading its body.
    """

    def __init__(
        self,
        url: str,
        *,
        client: httpx.Client | None = None,
        headers: Mapping[str, str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_BYTES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if chunk_size <= 0 or max_bytes <= 0:
            raise ValueError("chunk_size and max_bytes must be positive")
        self.url = url
        self.headers = dict(headers or {})
        self.chunk_size = chunk_size
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.bytes_fetched = 0
        self.requests = 0
        self._client = client
        self._owns_client = client is None
        self._chunks: dict[int, bytes] = {}
        self._size: int | None = None

    # ---- ByteSource ----

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n <= 0:
            return b""
        if self._size is not None:
            n = min(n, self._size - offset)
            if n <= 0:
                return b""
        first, last = offset // self.chunk_size, (offset + n - 1) // self.chunk_size
        index = first
        while index <= last:
            if index in self._chunks:
                index += 1
                continue
            run_end = index
            while run_end < last and run_end + 1 not in self._chunks:
                run_end += 1
            self._fetch_run(index, run_end)
            if self._size is not None:  # the total is known now: stop at the end of the file
                last = min(last, max(0, self._size - 1) // self.chunk_size)
            index = run_end + 1
        out = bytearray()
        pos, end = offset, offset + n
        while pos < end:
            chunk = self._chunks.get(pos // self.chunk_size)
            if chunk is None:
                break
            inner = pos - (pos // self.chunk_size) * self.chunk_size
            piece = chunk[inner : inner + (end - pos)]
            if not piece:
                break
            out += piece
            pos += len(piece)
            if len(chunk) < self.chunk_size:  # a short chunk is the end of the file
                break
        return bytes(out)

    def size(self) -> int | None:
        """The file's length: from a first chunk's Content-Range, else a HEAD."""
        if self._size is None and not self._chunks:
            self.read_at(0, 1)
        if self._size is None:
            self._head()
        return self._size

    # ---- HTTP ----

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = new_http_client(self.timeout)
        return self._client

    def _fetch_run(self, first: int, last: int) -> None:
        start = first * self.chunk_size
        end = (last + 1) * self.chunk_size  # exclusive
        if self._size is not None:
            end = min(end, self._size)
        want = end - start
        if self.bytes_fetched + want > self.max_bytes:
            raise ModelFileError(
                f"refusing to read more than {_size_text(self.max_bytes)} of header from {self.url}: "
                f"the header is larger than any real model's"
            )
        data = self._get_range(start, end - 1)
        for i in range(first, last + 1):
            lo = (i - first) * self.chunk_size
            piece = data[lo : lo + self.chunk_size]
            if piece:
                self._chunks[i] = piece
            if len(piece) < self.chunk_size:
                if self._size is None:
                    self._size = start + len(data)
                break

    def _get_range(self, start: int, last: int) -> bytes:
        import httpx

        want = last - start + 1
        headers = {**self.headers, "Range": f"bytes={start}-{last}", "Accept-Encoding": "identity"}
        self.requests += 1
        try:
            with self.client.stream("GET", self.url, headers=headers) as resp:
                if resp.status_code == 416:
                    self._size_from(resp.headers.get("Content-Range"))
                    if self._size is None:
                        self._size = start
                    return b""
                if resp.status_code == 200:
                    return self._whole_body(resp, start, want)
                if resp.status_code != 206:
                    raise _status_error(self.url, resp.status_code)
                got_start = self._size_from(resp.headers.get("Content-Range"))
                if got_start is not None and got_start != start:
                    raise ModelFileError(f"{self.url} answered bytes from {got_start} when asked for {start}")
                data = self._read_body(resp, want)
        except httpx.HTTPError as exc:
            raise ModelFileError(f"cannot read {self.url}: {exc}") from exc
        if self._size is not None and len(data) < min(want, self._size - start):
            raise ModelFileError(f"{self.url} sent {len(data)} bytes at {start}, fewer than the {want} asked for")
        return data

    def _whole_body(self, resp: httpx.Response, start: int, want: int) -> bytes:
        """A 200 to a Range request: accept it only when the whole file is no bigger than asked."""
        length = resp.headers.get("Content-Length")
        if start == 0 and length is not None and length.isdigit() and int(length) <= want:
            self._size = int(length)
            return self._read_body(resp, int(length))
        resp.close()  # never download a whole model by accident
        raise ModelFileError(
            f"{self.url} ignored the HTTP Range request and began sending the whole file; "
            f"Hearth reads only the header and stopped"
        )

    def _read_body(self, resp: httpx.Response, want: int) -> bytes:
        body = bytearray()
        for piece in resp.iter_bytes():
            body += piece
            if len(body) >= want:
                break
        self.bytes_fetched += len(body)
        return bytes(body[:want])

    def _size_from(self, content_range: str | None) -> int | None:
        """Record the total from `bytes a-b/total`; returns a (the start) when present."""
        match = _CONTENT_RANGE.match(content_range or "")
        if match is None:
            return None
        if match.group(3) != "*":
            self._size = int(match.group(3))
        return int(match.group(1)) if match.group(1) is not None else None

    def _head(self) -> None:
        import httpx

        self.requests += 1
        try:
            resp = self.client.head(self.url, headers={**self.headers, "Accept-Encoding": "identity"})
        except httpx.HTTPError as exc:
            raise ModelFileError(f"cannot read {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            raise _status_error(self.url, resp.status_code)
        for name in ("X-Linked-Size", "Content-Length"):
            value = resp.headers.get(name)
            if value is not None and value.isdigit():
                self._size = int(value)
                return

    def close(self) -> None:
        if self._owns_client and self._client is not None:
            self._client.close()
        self._client = None
        self._chunks.clear()

    def __enter__(self) -> HttpRangeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_remote_gguf(
    url: str,
    *,
    client: httpx.Client | None = None,
    headers: Mapping[str, str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_BYTES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
) -> GGUFHeader:
    """Parse and check the header of the GGUF at `url`, fetching only header chunks."""
    with HttpRangeSource(
        url, client=client, headers=headers, chunk_size=chunk_size, max_bytes=max_bytes, timeout=timeout
    ) as source:
        header = read_gguf_header(source, chunk_size=chunk_size)
        logger.debug("GGUF header of %s: %d bytes in %d requests", url, source.bytes_fetched, source.requests)
        return header


def read_remote_gguf_split(urls: Sequence[str], *, client: httpx.Client | None = None, **kw: Any) -> list[GGUFHeader]:
    """Every shard's header of a split GGUF (one model), in order; checks split.no / split.count."""
    if not urls:
        raise ModelFileError("no GGUF shard to read")
    own = client is None
    client = client or new_http_client(kw.get("timeout", DEFAULT_TIMEOUT))
    try:
        headers = [read_remote_gguf(u, client=client, **kw) for u in urls]
    finally:
        if own:
            client.close()
    for i, h in enumerate(headers):
        count, number = h.metadata.get("split.count"), h.metadata.get("split.no")
        if count is not None and count != len(urls):
            raise ModelFileError(f"shard {i + 1} says the model has {count} parts, not {len(urls)}")
        if number is not None and number != i:
            raise ModelFileError(f"shard {i + 1} says it is part {number + 1}; the shards are out of order")
    return headers
