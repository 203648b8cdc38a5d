"""`decide`: what the downloader does with each answer to its ranged GET, as a table; no server, no files."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from app.core.downloads.errors import AccessError, DownloadError, RemoteChangedError
from app.core.downloads.partial import PartialState
from app.core.downloads.response import Complete, Fail, Restart, RetryLater, Stream, decide
from app.core.downloads.spec import Source

SIZE = 1000
SHA = "ab" * 32
OTHER_SHA = "cd" * 32
SHA1 = "12" * 20
OTHER_SHA1 = "34" * 20
ETAG = "etag-1"
LFS = Source("https://hub/org/m/resolve/c0ffee/m.gguf", "m.gguf", sha256=SHA, size=SIZE, repo_id="org/m")
SMALL = Source("https://hub/org/m/resolve/c0ffee/config.json", "config.json", git_sha1=SHA1, size=SIZE, repo_id="org/m")

FRESH = PartialState(0, SIZE, None)
HALF = PartialState(400, SIZE, ETAG)
WHOLE = PartialState(SIZE, SIZE, ETAG)


def ranged(start: int, total: int | str = SIZE, etag: str = ETAG, **more: str) -> dict[str, str]:
    return {"Content-Range": f"bytes {start}-{SIZE - 1}/{total}", "ETag": f'"{etag}"', **more}


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


CASES = [
    # (id, status, headers, partial, source, redirects, expected decision)
    ("206 resumes where the partial ends", 206, ranged(400), HALF, LFS, (), Stream(SIZE, ETAG)),
    (
        "206 at another offset restarts",
        206,
        ranged(300),
        HALF,
        LFS,
        (),
        Restart("the server resumed at 300, not 400", "wrong range", 0),
    ),
    (
        "206 with a new ETag restarts and records it",
        206,
        ranged(400, etag="etag-2"),
        HALF,
        LFS,
        (),
        Restart(
            "the file's ETag changed since the partial was written", "ETag changed", 0, new_etag=True, etag="etag-2"
        ),
    ),
    (
        "206 with a weak ETag counts as a changed one",
        206,
        {**ranged(400), "ETag": 'W/"etag-1"'},
        HALF,
        LFS,
        (),
        Restart("the file's ETag changed since the partial was written", "ETag changed", 0, new_etag=True, etag=None),
    ),
    ("206 of unknown total", 206, ranged(400, total="*"), HALF, LFS, (), Stream(None, ETAG)),
    (
        "200 after a partial: range ignored",
        200,
        {"Content-Length": str(SIZE), "ETag": f'"{ETAG}"'},
        HALF,
        LFS,
        (),
        Stream(SIZE, ETAG, restart="range ignored"),
    ),
    (
        "200 after a partial with a new ETag",
        200,
        {"Content-Length": str(SIZE), "ETag": '"etag-2"'},
        HALF,
        LFS,
        (),
        Stream(SIZE, "etag-2", restart="the file's ETag changed"),
    ),
    ("200 from zero", 200, {"Content-Length": str(SIZE), "ETag": f'"{ETAG}"'}, FRESH, LFS, (), Stream(SIZE, ETAG)),
    ("200 without a length", 200, {}, FRESH, LFS, (), Stream(None, None)),
    ("416 when the partial is whole", 416, {}, WHOLE, LFS, (), Complete()),
    ("416 when it is not", 416, {}, HALF, LFS, (), Restart("the server refused the range", "range not satisfiable")),
    (
        "416 when the size is unknown",
        416,
        {},
        PartialState(400, None, ETAG),
        LFS,
        (),
        Restart("the server refused the range", "range not satisfiable"),
    ),
    ("408 retried", 408, {}, HALF, LFS, (), RetryLater("server answered 408")),
    ("429 with Retry-After seconds", 429, {"Retry-After": "7"}, HALF, LFS, (), RetryLater("server answered 429", 7.0)),
    ("500 retried with backoff", 500, {}, HALF, LFS, (), RetryLater("server answered 500")),
    (
        "503 with an unreadable Retry-After",
        503,
        {"Retry-After": "soon"},
        HALF,
        LFS,
        (),
        RetryLater("server answered 503"),
    ),
    (
        "206 with a malformed Content-Range",
        206,
        {"Content-Range": "bytes=400-999"},
        HALF,
        LFS,
        (),
        RetryLater("malformed Content-Range"),
    ),
    ("206 without a Content-Range", 206, {}, HALF, LFS, (), RetryLater("malformed Content-Range")),
    (
        "same LFS sha256 in X-Linked-Etag",
        206,
        ranged(400, **{"X-Linked-Etag": f'"{SHA.upper()}"'}),
        HALF,
        LFS,
        (),
        Stream(SIZE, ETAG),
    ),
    (
        "git sha1 ETag of the same small file",
        200,
        {"Content-Length": str(SIZE), "ETag": f'"{SHA1}"'},
        FRESH,
        SMALL,
        (),
        Stream(SIZE, SHA1),
    ),
    (
        "a non-hex X-Linked-Etag says nothing",
        200,
        {"Content-Length": str(SIZE), "X-Linked-Etag": '"x"'},
        FRESH,
        LFS,
        (),
        Stream(SIZE, None),
    ),
]


@pytest.mark.parametrize(
    ("status", "headers", "partial", "source", "redirects", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(status, headers, partial, source, redirects, expected):
    assert decide(status, headers, partial, source, redirects) == expected


FAILURES = [
    # (id, status, headers, source, redirects, error type, message part, discard the partial)
    ("401 on a gated repo", 401, {"X-Error-Code": "GatedRepo"}, LFS, (), AccessError, "accept the licence", False),
    ("403 on a gated repo", 403, {"X-Error-Code": "GatedRepo"}, LFS, (), AccessError, "accept the licence", False),
    ("401 otherwise: the token", 401, {}, LFS, (), AccessError, "check your Hugging Face token", False),
    (
        "403 with another code",
        403,
        {"X-Error-Code": "RepoNotFound"},
        LFS,
        (),
        AccessError,
        "org/m (403): check your Hugging Face token",
        False,
    ),
    (
        "404",
        404,
        {"X-Error-Code": "EntryNotFound"},
        LFS,
        (),
        AccessError,
        "m.gguf was not found on the Hub (Entry",
        False,
    ),
    ("302 not followed", 302, {}, LFS, (), DownloadError, "Unexpected answer 302", False),
    (
        "another LFS sha256 in X-Linked-Etag",
        206,
        ranged(400, **{"X-Linked-Etag": f'"{OTHER_SHA}"'}),
        LFS,
        (),
        RemoteChangedError,
        "m.gguf changed on the Hub",
        True,
    ),
    (
        "another LFS sha256 on the redirect",
        200,
        {"Content-Length": str(SIZE)},
        LFS,
        (None, f'"{OTHER_SHA}"'),
        RemoteChangedError,
        "changed on the Hub",
        True,
    ),
    (
        "another git sha1 ETag",
        200,
        {"Content-Length": str(SIZE), "ETag": f'"{OTHER_SHA1}"'},
        SMALL,
        (),
        RemoteChangedError,
        "config.json changed on the Hub",
        True,
    ),
    (
        "another size by Content-Length",
        200,
        {"Content-Length": str(SIZE + 1)},
        LFS,
        (),
        RemoteChangedError,
        "changed on the Hub",
        True,
    ),
    (
        "another size by Content-Range",
        206,
        ranged(400, total=SIZE - 1),
        LFS,
        (),
        RemoteChangedError,
        "changed on the Hub",
        True,
    ),
]


@pytest.mark.parametrize(
    ("status", "headers", "source", "redirects", "error", "message", "discard"),
    [c[1:] for c in FAILURES],
    ids=[c[0] for c in FAILURES],
)
def test_failures(status, headers, source, redirects, error, message, discard):
    verdict = decide(status, headers, HALF, source, redirects)
    assert isinstance(verdict, Fail) and type(verdict.error) is error
    assert message in str(verdict.error) and verdict.discard is discard


def test_retry_after_as_an_http_date():
    verdict = decide(503, {"Retry-After": http_date(30)}, HALF, LFS)
    assert isinstance(verdict, RetryLater) and 27 <= verdict.retry_after <= 30


def test_header_names_are_case_insensitive_for_plain_dicts_and_httpx():
    lower = {"content-range": f"bytes 300-{SIZE - 1}/{SIZE}", "etag": f'"{ETAG}"'}
    expected = Restart("the server resumed at 300, not 400", "wrong range", 0)
    assert decide(206, lower, HALF, LFS) == expected
    assert decide(206, httpx.Headers(ranged(300)), HALF, LFS) == expected


def test_remote_change_is_checked_before_the_range():
    # A partial of an old version must not be "resumed" by restarting it: the download stops and says why.
    verdict = decide(206, ranged(300, total=SIZE + 5), HALF, LFS)
    assert isinstance(verdict, Fail) and verdict.discard and isinstance(verdict.error, RemoteChangedError)
