"""Judging the Hub's answer to one ranged GET: status, ETag, Content-Range, and whether the remote file changed.

`accept` updates the download's partial state (restart from zero, new ETag, learnt size) before any body byte is read.
"""

from __future__ import annotations

import email.utils
import re
import time
from typing import TYPE_CHECKING

from app.core.downloads.errors import AccessError, DownloadError, RemoteChangedError
from app.core.downloads.partial import new_hasher

if TYPE_CHECKING:
    from app.core.downloads.downloader import FileDownload

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Retry(Exception):
    """A failed attempt worth retrying; `retry_after` overrides the backoff when the server asked for a delay."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


def strong_etag(value: str | None) -> str | None:
    """A strong ETag without quotes; weak ones cannot be used with If-Range."""
    if not value or value.startswith("W/"):
        return None
    return value.strip().strip('"') or None


def retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def accept(dl: FileDownload, response, fd: int) -> bool:
    """Check status and headers; True when the body should be streamed into the partial."""
    status = response.status_code
    if status == 416:
        if dl._total is not None and dl._done >= dl._total:
            return False
        dl._restart_from_zero(fd, "the server refused the range")
        raise Retry("range not satisfiable")
    if status in (401, 403):
        code = response.headers.get("X-Error-Code", "")
        hint = ("accept the licence on the model page, then add a Hugging Face token" if code == "GatedRepo"
                else "check your Hugging Face token")
        raise AccessError(f"The Hub refused access to {dl.repo_id or dl.url} ({status}): {hint}.")
    if status == 404:
        raise AccessError(f"{dl.path} was not found on the Hub ({response.headers.get('X-Error-Code', 404)}).")
    if status in (408, 429) or status >= 500:
        raise Retry(f"server answered {status}", retry_after(response.headers.get("Retry-After")))
    if status not in (200, 206):
        raise DownloadError(f"Unexpected answer {status} from the Hub for {dl.path}.")
    etag = strong_etag(response.headers.get("ETag"))
    start, total = 0, None
    if status == 206:
        m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if not m:
            raise Retry("malformed Content-Range")
        start = int(m.group(1))
        total = int(m.group(3)) if m.group(3) != "*" else None
    elif "Content-Length" in response.headers:
        total = int(response.headers["Content-Length"])
    check_remote(dl, response, total)
    side = dl._side
    if status == 206 and side.etag and etag != side.etag:
        dl._restart_from_zero(fd, "the file's ETag changed since the partial was written")
        side.etag = etag
        side.save(dl.sidecar_path)
        raise Retry("ETag changed", retry_after=0)
    if status == 206 and start != dl._done:
        dl._restart_from_zero(fd, f"the server resumed at {start}, not {dl._done}")
        raise Retry("wrong range", retry_after=0)
    if status == 200 and dl._done:
        why = "the file's ETag changed" if side.etag and etag != side.etag else "range ignored"
        dl._restart_from_zero(fd, why)
    if total is not None and dl._total is None:
        dl._total = side.size = total
        if dl._hasher is None:
            dl._hasher = new_hasher(dl.sha256, total)
    if etag != side.etag:
        side.etag = etag
        side.save(dl.sidecar_path)
    return True


def check_remote(dl: FileDownload, response, total: int | None) -> None:
    """The Hub now serves another file than the metadata promised: discard, say so, don't fetch it all (T10)."""
    linked = strong_etag(response.headers.get("X-Linked-Etag"))
    for r in response.history:
        linked = linked or strong_etag(r.headers.get("X-Linked-Etag"))
    etag = (strong_etag(response.headers.get("ETag")) or "").lower()
    changed = (
        (dl.sha256 and linked and _HEX64.match(linked.lower()) and linked.lower() != dl.sha256)
        or (dl.git_sha1 and _HEX40.match(etag) and etag != dl.git_sha1)
        or (dl.expected_size is not None and total is not None and total != dl.expected_size)
    )
    if changed:
        dl.part.unlink(missing_ok=True)
        dl.sidecar_path.unlink(missing_ok=True)
        dl._hasher, dl._done = None, 0
        raise RemoteChangedError(
            f"{dl.path} changed on the Hub since its details were read; refresh the model and try again."
        )
