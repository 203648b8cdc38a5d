"""Judging the Hub's answer to one ranged GET before any body byte is read: status, ETag, Content-Range, and
whether the remote file changed. `decide` only says what to do; the downloader does it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.core.downloads.errors import AccessError, DownloadError, RemoteChangedError
from app.core.downloads.partial import PartialState
from app.core.downloads.spec import Source
from app.core.hub.errors import parse_retry_after

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class Stream:
    """Read the body into the partial at its end, after truncating it to zero if `restart` names why.
    `total` (None when the response does not tell) and `etag` are recorded first."""

    total: int | None
    etag: str | None
    restart: str | None = None


@dataclass(frozen=True)
class Complete:
    """The partial already holds the whole file (416 on a range that starts at its end): verify it."""


@dataclass(frozen=True)
class Restart:
    """Truncate the partial to zero (`why`), then retry; with `new_etag`, record `etag` as the file's ETag."""

    why: str
    reason: str
    retry_after: float | None = None
    new_etag: bool = False
    etag: str | None = None


@dataclass(frozen=True)
class RetryLater:
    """A failure worth retrying, keeping the partial; `retry_after` is the server's wish, if it said one."""

    reason: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Fail:
    """Give up with `error`; with `discard`, the partial is of another file and must go (T10)."""

    error: DownloadError
    discard: bool = False


Decision = Stream | Complete | Restart | RetryLater | Fail


def strong_etag(value: str | None) -> str | None:
    """A strong ETag without quotes; weak ones cannot be used with If-Range."""
    if not value or value.startswith("W/"):
        return None
    return value.strip().strip('"') or None


def redirect_etags(response) -> list[str | None]:
    """The X-Linked-Etag of each redirect that led to `response` (the Hub sends the LFS sha256 there)."""
    return [r.headers.get("X-Linked-Etag") for r in response.history]


def decide(
    status: int, headers: Mapping[str, str], partial: PartialState, source: Source, redirects: Iterable[str | None] = ()
) -> Decision:
    """What to do with an answer to a GET of `source` that asked for the bytes after `partial.done`.

    `headers` may be any mapping (names are matched case-insensitively); `redirects` are the X-Linked-Etag
    values of the redirects on the way. No side effects.
    """
    h = {k.lower(): v for k, v in headers.items()}
    if status == 416:
        if partial.total is not None and partial.done >= partial.total:
            return Complete()
        return Restart("the server refused the range", "range not satisfiable")
    if status in (401, 403):
        hint = (
            "accept the licence on the model page, then add a Hugging Face token"
            if h.get("x-error-code", "") == "GatedRepo"
            else "check your Hugging Face token"
        )
        return Fail(AccessError(f"The Hub refused access to {source.repo_id or source.url} ({status}): {hint}."))
    if status == 404:
        return Fail(AccessError(f"{source.path} was not found on the Hub ({h.get('x-error-code', 404)})."))
    if status in (408, 429) or status >= 500:
        return RetryLater(f"server answered {status}", parse_retry_after(h.get("retry-after")))
    if status not in (200, 206):
        return Fail(DownloadError(f"Unexpected answer {status} from the Hub for {source.path}."))

    etag = strong_etag(h.get("etag"))
    start, total = 0, None
    if status == 206:
        m = _CONTENT_RANGE.match(h.get("content-range", ""))
        if not m:
            return RetryLater("malformed Content-Range")
        start = int(m.group(1))
        total = int(m.group(3)) if m.group(3) != "*" else None
    elif "content-length" in h:
        total = int(h["content-length"])
    if remote_changed(source, h, total, redirects):
        return Fail(
            RemoteChangedError(
                f"{source.path} changed on the Hub since its details were read; refresh the model and try again."
            ),
            discard=True,
        )
    if status == 206 and partial.etag and etag != partial.etag:
        return Restart(
            "the file's ETag changed since the partial was written", "ETag changed", 0, new_etag=True, etag=etag
        )
    if status == 206 and start != partial.done:
        return Restart(f"the server resumed at {start}, not {partial.done}", "wrong range", 0)
    restart = None
    if status == 200 and partial.done:
        restart = "the file's ETag changed" if partial.etag and etag != partial.etag else "range ignored"
    return Stream(total, etag, restart)


def remote_changed(
    source: Source, headers: Mapping[str, str], total: int | None, redirects: Iterable[str | None] = ()
) -> bool:
    """The Hub now serves another file than the metadata promised (T10): its LFS sha256 (X-Linked-Etag, here or
    on a redirect), its git sha1 (the ETag of a small file) or its size differs. `headers` has lower-case names."""
    linked = strong_etag(headers.get("x-linked-etag"))
    for value in redirects:
        linked = linked or strong_etag(value)
    etag = (strong_etag(headers.get("etag")) or "").lower()
    return bool(
        (source.sha256 and linked and _HEX64.match(linked.lower()) and linked.lower() != source.sha256)
        or (source.git_sha1 and _HEX40.match(etag) and etag != source.git_sha1)
        or (source.size is not None and total is not None and total != source.size)
    )
