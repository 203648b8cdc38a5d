"""One file from the Hub: ranged GET that resumes across restarts, hashed while streaming, verified, then placed.

Threads: `run()` blocks its caller; `progress` and `on_phase` are called on that same thread. Another thread may
set `cancel` or `pause` at any time; a watchdog thread then ends even a stalled read within ~0.1 s.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from app.core.atomic import _fsync_dir
from app.core.downloads.errors import (
    DiskFullError,
    DownloadCancelled,
    DownloadPaused,
    IntegrityError,
    NetworkError,
)
from app.core.downloads.locking import FileLock
from app.core.downloads.partial import RateMeter, Sidecar, hash_file, hash_prefix, new_hasher
from app.core.downloads.paths import (
    check_file_type,
    check_no_symlinks,
    destination,
    make_parents,
    open_nofollow,
    validate_remote_name,
)
from app.core.downloads.response import Retry, accept
from app.core.downloads.writer import WRITE_CHUNK, receive_body
from app.core.downloads.writer import write_at as _write_at  # a module attribute: tests swap it for a full disk

logger = logging.getLogger(__name__)

__all__ = ["DISK_MARGIN", "WRITE_CHUNK", "FileDownload", "download_file", "enlarge_socket_reads"]
SOCKET_READ = 1024 * 1024


def enlarge_socket_reads() -> None:
    """httpcore reads the socket 64 KiB at a time, which caps a loopback or LAN download near half
    of curl's speed; 1 MiB reads close the gap. It is a class attribute, so this applies process-wide
    (harmless for other clients: a read returns what has arrived)."""
    try:
        from httpcore._sync.http11 import HTTP11Connection
    except ImportError:  # a newer httpcore moved it: keep its default
        return
    if getattr(HTTP11Connection, "READ_NUM_BYTES", 0) < SOCKET_READ:
        HTTP11Connection.READ_NUM_BYTES = SOCKET_READ


DISK_MARGIN = 64 * 1024 * 1024
PROGRESS_INTERVAL_S = 0.2
MAX_RETRY_AFTER_S = 600.0
ProgressFn = Callable[[int, int, float], None]


class FileDownload:
    """Download `url` to `dest`, verified against `expected_sha256` (LFS) or `expected_git_sha1` (small files).

    `root` is the models folder: `dest` must lie inside it and no folder on the way may be a symlink.
    Kept across `run()` calls (pause → resume), the object also keeps the partial's hash state in memory.
    """

    def __init__(
        self,
        url: str,
        dest: Path,
        *,
        expected_size: int | None = None,
        expected_sha256: str | None = None,
        expected_git_sha1: str | None = None,
        commit: str = "",
        repo_id: str = "",
        path: str = "",
        root: Path | None = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        client=None,
        cancel: threading.Event | None = None,
        pause: threading.Event | None = None,
        progress: ProgressFn | None = None,
        on_phase: Callable[[str], None] | None = None,
        stall_timeout_s: float = 30.0,
        max_retries: int = 8,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        quarantine_dir: Path | None = None,
    ) -> None:
        if not (expected_sha256 or expected_git_sha1):
            raise ValueError("a download needs the file's sha256 or git sha1 to verify it")
        self.url, self.dest = url, Path(dest)
        self.root = Path(root) if root is not None else self.dest.parent
        self.path = path or self.dest.name
        self.expected_size = expected_size
        self.sha256 = expected_sha256.lower() if expected_sha256 else None
        self.git_sha1 = None if self.sha256 else expected_git_sha1.lower()
        self.commit, self.repo_id = commit, repo_id
        self.headers = {"Accept-Encoding": "identity", **(headers or {})}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.client = client
        self.cancel = cancel or threading.Event()
        self.pause = pause or threading.Event()
        self.progress, self.on_phase = progress, on_phase
        self.stall_timeout_s, self.max_retries = stall_timeout_s, max_retries
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.quarantine_dir = Path(quarantine_dir) if quarantine_dir else self.root / "quarantine"
        self.part = self.dest.with_name(self.dest.name + ".part")
        self.sidecar_path = self.dest.with_name(self.dest.name + ".part.json")
        self.lock_path = self.dest.with_name(f".{self.dest.name}.lock")
        self.bytes_received = 0  # body bytes off the network over all attempts and runs
        self.prefix_rehash_s = 0.0  # time spent re-reading the partial on the last resume
        self._hasher = None
        self._hashed_id: tuple | None = None  # (ino, size, mtime) of the partial the in-memory hash covers
        self._done = 0
        self._total: int | None = expected_size
        self._side: Sidecar | None = None
        self._rate = RateMeter()
        self._last_emit = 0.0
        self._watch = None

    # ---- public ----

    def run(self) -> Path:
        """Download (or find already downloaded) and verify; returns `dest`. Raises a `DownloadError`."""
        self._check_paths()
        if self._existing_ok(fix=False):
            return self.dest
        self._precheck_space()
        make_parents(self.root, self.dest)
        lock = FileLock(self.lock_path, self._stopping)
        if not lock.acquire():
            self._raise_if_stopped()
        try:
            if self._existing_ok(fix=True):
                return self.dest
            return self._download()
        finally:
            lock.release()

    @property
    def total(self) -> int | None:
        return self._total

    # ---- checks before writing ----

    def _check_paths(self) -> None:
        validate_remote_name(self.path)
        check_file_type(self.path)
        # Relative to the root as given (not resolved), so `..` or a symlink in `dest` cannot hide.
        rel = os.path.relpath(os.path.normpath(self.dest.absolute()), os.path.normpath(self.root.absolute()))
        self.root = self.root.resolve()
        self.dest = destination(self.root, Path(rel).as_posix())
        for p in (self.part, self.sidecar_path, self.lock_path):
            check_no_symlinks(self.root, self.dest.parent / p.name)
        self.part, self.sidecar_path, self.lock_path = (self.dest.parent / p.name for p in
                                                        (self.part, self.sidecar_path, self.lock_path))

    def _existing_ok(self, fix: bool) -> bool:
        """A file already in place that verifies; with `fix`, a bad one is quarantined and stale partials go."""
        try:
            size = os.lstat(self.dest).st_size
        except FileNotFoundError:
            return False
        if self.expected_size is not None and size != self.expected_size:
            ok = False
        else:
            self._phase("verifying")
            ok = hash_file(self.dest, self.sha256) == (self.sha256 or self.git_sha1)
        if ok and fix:
            for stale in (self.part, self.sidecar_path):
                stale.unlink(missing_ok=True)
        elif not ok and fix:
            self._quarantine(self.dest, "the file already in place does not match the Hub's hash")
        return ok

    def _precheck_space(self) -> None:
        if self.expected_size is None:
            return
        try:
            have = os.lstat(self.part).st_size
        except FileNotFoundError:
            have = 0
        needed = max(0, self.expected_size - have) + DISK_MARGIN
        probe = self.dest.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < needed:
            raise DiskFullError(self.path, needed, free)

    # ---- the download ----

    def _download(self) -> Path:
        from app.core.downloads.watchdog import Watchdog

        own_client = self.client is None
        client = self._make_client() if own_client else self.client
        fd = open_nofollow(self.part, os.O_RDWR | os.O_CREAT)
        self._watch = Watchdog(self.stall_timeout_s, self._stopping, self.path)
        try:
            self._open_partial(fd)
            self._fetch(client, fd)
            self._verify(fd)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(self.part, self.dest)
            _fsync_dir(self.dest.parent)
            self.sidecar_path.unlink(missing_ok=True)
            self._emit(self._done, force=True)
            logger.info("downloaded and verified %s (%d bytes)", self.path, self._done)
            return self.dest
        except DownloadCancelled:
            if fd >= 0:
                os.close(fd)
                fd = -1
            self.part.unlink(missing_ok=True)
            self.sidecar_path.unlink(missing_ok=True)
            self._hasher = None
            raise
        finally:
            if fd >= 0:
                self._remember_hash_state(fd)
                os.close(fd)
            self._watch.close()
            if own_client:
                client.close()

    def _make_client(self):
        import httpx

        enlarge_socket_reads()
        return httpx.Client(follow_redirects=True, trust_env=True)

    def _open_partial(self, fd: int) -> None:
        want = Sidecar(self.url, self.repo_id, self.commit, self.path, self.expected_size, self.sha256,
                       self.git_sha1)
        have = Sidecar.load(self.sidecar_path)
        size = os.fstat(fd).st_size
        if have is None or not have.same_content(want) or (size and have.size is None):
            if size:
                logger.info("discarding a partial of %s that belongs to another version", self.path)
            os.ftruncate(fd, 0)
            size, have = 0, want
        self._side, self._done, self._total = have, size, have.size
        self._side.url, self._side.commit = self.url, self.commit
        self._side.save(self.sidecar_path)
        if self._hasher is not None and self._hashed_id == self._file_id(fd):
            return  # same process resumed after pause: the hash state in memory already covers the prefix
        self._hasher = new_hasher(self.sha256, self._total) if self._total is not None or self.sha256 else None
        if size:
            self._phase("verifying")
            self.prefix_rehash_s = hash_prefix(fd, self._hasher, size)
            logger.info("resuming %s at %d bytes; re-hashing the partial took %.2f s",
                        self.path, size, self.prefix_rehash_s)

    def _file_id(self, fd: int) -> tuple:
        st = os.fstat(fd)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _remember_hash_state(self, fd: int) -> None:
        self._hashed_id = self._file_id(fd) if self._hasher is not None else None

    def _restart_from_zero(self, fd: int, why: str) -> None:
        logger.info("restarting %s from zero: %s", self.path, why)
        os.ftruncate(fd, 0)
        self._done = 0
        self._hasher = new_hasher(self.sha256, self._total) if self._total is not None or self.sha256 else None

    def _fetch(self, client, fd: int) -> None:
        failures = 0
        while True:
            self._raise_if_stopped()
            before = self._done
            try:
                self._attempt(client, fd)
                return
            except Retry as retry:
                failures = 1 if self._done > before else failures + 1  # progress resets the count
                if failures > self.max_retries:
                    raise NetworkError(
                        f"Gave up downloading {self.path} after {failures} failed attempts ({retry}). "
                        "What was downloaded is kept; resume to continue."
                    ) from None
                if retry.retry_after is not None:
                    delay = min(retry.retry_after, MAX_RETRY_AFTER_S)
                else:
                    delay = min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 1)) * random.uniform(0.5, 1)
                logger.warning("%s: %s; retry %d/%d in %.1f s", self.path, retry, failures, self.max_retries, delay)
                self._sleep(delay)

    def _attempt(self, client, fd: int) -> None:
        import httpx

        headers = dict(self.headers)
        if self._done > 0:
            headers["Range"] = f"bytes={self._done}-"
            if self._side.etag:
                headers["If-Range"] = f'"{self._side.etag}"'
        timeout = httpx.Timeout(15.0, read=self.stall_timeout_s + 5.0)
        request = client.build_request("GET", self.url, headers=headers, timeout=timeout,
                                       extensions={"trace": self._trace})
        self._watch.arm()
        try:
            response = client.send(request, stream=True, follow_redirects=True)
        except httpx.TransportError as exc:
            self._watch.disarm()
            self._interrupted(exc)
        try:
            stream = response.extensions.get("network_stream")
            self._watch.attach(stream.get_extra_info("socket") if stream is not None else None)
            if accept(self, response, fd):
                self._stream(response, fd)
        finally:
            self._watch.disarm()
            response.close()

    def _trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            self._watch.attach(info["return_value"].get_extra_info("socket"))

    def _stream(self, response, fd: int) -> None:
        enlarge_socket_reads()  # also for a client the caller passed in
        receive_body(self, response, fd, _write_at)  # `_write_at` read now, so a test's swap takes effect

    def _verify(self, fd: int) -> None:
        digest = self._hasher.hexdigest() if self._hasher is not None else ""
        expected = self.sha256 or self.git_sha1
        if self._total is not None and self._done != self._total:
            why = f"size {self._done} instead of {self._total}"
        elif digest != expected:
            why = f"{'sha256' if self.sha256 else 'git sha1'} {digest[:12]}… instead of {expected[:12]}…"
        else:
            return
        os.fsync(fd)
        self._hasher = None
        self._quarantine(self.part, why)

    def _quarantine(self, source: Path, why: str) -> None:
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = self.quarantine_dir / f"{self.dest.name}.{time.time_ns()}.quarantined"
        os.replace(source, target)
        self.sidecar_path.unlink(missing_ok=True)
        logger.error("integrity check failed for %s (%s); moved to %s", self.path, why, target)
        raise IntegrityError(
            f"{self.path} failed its integrity check ({why}). The damaged copy was moved to quarantine and "
            "will not be used; retry the download.",
            quarantined=str(target),
        )

    # ---- stop, sleep, report ----

    def _stopping(self) -> bool:
        return self.cancel.is_set() or self.pause.is_set()

    def _raise_if_stopped(self) -> None:
        if self.cancel.is_set():
            raise DownloadCancelled(self.path)
        if self.pause.is_set():
            raise DownloadPaused(self.path)

    def _interrupted(self, exc: Exception):
        self._raise_if_stopped()
        if self._watch.reason == "stall" or type(exc).__name__ == "ReadTimeout":
            raise Retry(f"no data for {self.stall_timeout_s:g} s") from None
        raise Retry(f"{type(exc).__name__}: {exc}") from None

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._raise_if_stopped()
            self.cancel.wait(min(0.05, left))
        self._raise_if_stopped()

    def _phase(self, name: str) -> None:
        if self.on_phase:
            self.on_phase(name)

    def _emit(self, position: int, force: bool = False) -> None:
        """Progress counts bytes received, including those not yet written; at most every 0.2 s."""
        now = time.monotonic()
        if not force and now - self._last_emit < PROGRESS_INTERVAL_S:
            return
        self._last_emit = now
        rate = self._rate.add(position, now)
        if self.progress:
            self.progress(position, self._total or 0, rate)


def download_file(url: str, dest: Path, **kwargs) -> Path:
    """`FileDownload(url, dest, **kwargs).run()`: see `FileDownload` for the keyword arguments."""
    return FileDownload(url, dest, **kwargs).run()
