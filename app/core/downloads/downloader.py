"""One file from the Hub: ranged GET that resumes across restarts, hashed while streaming, verified, then placed.

Threads: `run()` blocks its caller; the `Reporting` callbacks are called on that same thread. Another thread may
set the `Controls` events at any time; a watchdog thread then ends even a stalled read within ~0.1 s.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from app.core.downloads.errors import DiskFullError, DownloadCancelled, IntegrityError, NetworkError
from app.core.downloads.locking import FileLock
from app.core.downloads.partial import PartialFile, hash_file, partial_paths
from app.core.downloads.paths import check_file_type, check_no_symlinks, destination, make_parents, validate_remote_name
from app.core.downloads.progress import Reporting
from app.core.downloads.response import Complete, Decision, Fail, Restart, RetryLater, Stream, decide, redirect_etags
from app.core.downloads.retry import Retry
from app.core.downloads.spec import Controls, DownloadOptions, Source, Target
from app.core.downloads.watchdog import Watchdog
from app.core.downloads.writer import receive_body

logger = logging.getLogger(__name__)

SOCKET_READ = 1024 * 1024
DISK_MARGIN = 64 * 1024 * 1024


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


class FileDownload:
    """Download `source` to `target.dest`, verified against its sha256 (LFS) or git sha1 (small files).

    `dest` must lie inside `target.root` and no folder on the way may be a symlink. Kept across `run()` calls
    (pause → resume), the object also keeps the partial's hash state in memory.
    """

    _watch: Watchdog  # one per run of `_download`, which is the only time it is used

    def __init__(
        self,
        source: Source,
        target: Target,
        *,
        options: DownloadOptions | None = None,
        controls: Controls | None = None,
        reporting: Reporting | None = None,
        token: str | None = None,
    ) -> None:
        self.source, self.path = source, source.path
        assert target.root is not None and target.quarantine_dir is not None  # Target fills in both
        self.dest, self.root, self.quarantine_dir = target.dest, target.root, target.quarantine_dir
        self.options = options or DownloadOptions()
        self.controls = controls or Controls()
        self.reporting = reporting or Reporting()
        self._headers = {"Accept-Encoding": "identity"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.part, self.sidecar_path = partial_paths(self.dest)
        self.lock_path = self.dest.with_name(f".{self.dest.name}.lock")
        self.bytes_received = 0  # body bytes off the network over all attempts and runs
        self.prefix_rehash_s = 0.0  # time spent re-reading the partial on the last resume
        self._partial: PartialFile | None = None  # made once the paths are checked; kept for its hash state

    # ---- public ----

    def run(self, client=None) -> Path:
        """Download (or find already downloaded) and verify; returns `dest`. Raises a `DownloadError`.

        `client` is an `httpx.Client` to use for this run (closed by its owner); without one, a client is made
        and closed here.
        """
        self._check_paths()
        if self._existing_ok(fix=False):
            return self.dest
        self._precheck_space()
        make_parents(self.root, self.dest)
        lock = FileLock(self.lock_path, self.controls.stopping)
        if not lock.acquire():
            self.controls.raise_if_stopped(self.path)
        try:
            if self._existing_ok(fix=True):
                return self.dest
            return self._download(client)
        finally:
            lock.release()

    @property
    def total(self) -> int | None:
        """The file's size: from the Hub's metadata, or once a response told it."""
        return self._partial.total if self._partial is not None else self.source.size

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
        self.part, self.sidecar_path, self.lock_path = (
            self.dest.parent / p.name for p in (self.part, self.sidecar_path, self.lock_path)
        )
        if self._partial is None:
            self._partial = PartialFile(self.part, self.sidecar_path, self.source)

    def _existing_ok(self, fix: bool) -> bool:
        """A file already in place that verifies; with `fix`, a bad one is quarantined and stale partials go."""
        try:
            size = os.lstat(self.dest).st_size
        except FileNotFoundError:
            return False
        if self.source.size is not None and size != self.source.size:
            ok = False
        else:
            self.reporting.phase("verifying")
            ok = hash_file(self.dest, self.source.sha256) == self.source.digest
        if ok and fix:
            for stale in (self.part, self.sidecar_path):
                stale.unlink(missing_ok=True)
        elif not ok and fix:

            def move(target: Path) -> None:
                os.replace(self.dest, target)
                self.sidecar_path.unlink(missing_ok=True)

            self._quarantine(move, "the file already in place does not match the Hub's hash")
        return ok

    def _precheck_space(self) -> None:
        if self.source.size is None:
            return
        try:
            have = os.lstat(self.part).st_size
        except FileNotFoundError:
            have = 0
        needed = max(0, self.source.size - have) + DISK_MARGIN
        probe = self.dest.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < needed:
            raise DiskFullError(self.path, needed, free)

    # ---- the download ----

    def _download(self, client) -> Path:
        own_client = client is None
        if own_client:
            client = self._make_client()
        partial = self._partial
        assert partial is not None  # made by _check_paths, which run() calls first
        self._watch = Watchdog(self.options.stall_timeout_s, self.controls.stopping, self.path)
        try:
            if partial.open():
                self.reporting.phase("verifying")
                self.prefix_rehash_s = partial.rehash()
            self._fetch(client, partial)
            self._verify(partial)
            partial.finish(self.dest)
            self.reporting.emit(partial.done, partial.total, force=True)
            logger.info("downloaded and verified %s (%d bytes)", self.path, partial.done)
            return self.dest
        except DownloadCancelled:
            partial.discard()
            raise
        finally:
            partial.close()
            self._watch.close()
            if own_client:
                client.close()

    def _make_client(self):
        import httpx

        enlarge_socket_reads()
        return httpx.Client(follow_redirects=True, trust_env=True)

    def _fetch(self, client, partial: PartialFile) -> None:
        budget = self.options.retry.attempts()
        while True:
            self.controls.raise_if_stopped(self.path)
            before = partial.done
            try:
                self._attempt(client, partial)
                return
            except Retry as retry:
                delay = budget.failed(partial.done > before, retry.retry_after)
                if delay is None:
                    raise NetworkError(
                        f"Gave up downloading {self.path} after {budget.failures} failed attempts ({retry}). "
                        "What was downloaded is kept; resume to continue."
                    ) from None
                logger.warning(
                    "%s: %s; retry %d/%d in %.1f s", self.path, retry, budget.failures, budget.policy.max_retries, delay
                )
                self.controls.sleep(delay, self.path)

    def _attempt(self, client, partial: PartialFile) -> None:
        import httpx

        headers = dict(self._headers)
        if partial.done > 0:
            headers["Range"] = f"bytes={partial.done}-"
            if partial.etag:
                headers["If-Range"] = f'"{partial.etag}"'
        timeout = httpx.Timeout(15.0, read=self.options.stall_timeout_s + 5.0)
        request = client.build_request(
            "GET", self.source.url, headers=headers, timeout=timeout, extensions={"trace": self._trace}
        )
        self._watch.arm()
        try:
            response = client.send(request, stream=True, follow_redirects=True)
        except httpx.TransportError as exc:
            self._watch.disarm()
            self._interrupted(exc)
        try:
            stream = response.extensions.get("network_stream")
            self._watch.attach(stream.get_extra_info("socket") if stream is not None else None)
            decision = decide(
                response.status_code, response.headers, partial.state(), self.source, redirect_etags(response)
            )
            if self._apply(decision, partial):
                self._stream(response, partial)
        finally:
            self._watch.disarm()
            response.close()

    def _apply(self, decision: Decision, partial: PartialFile) -> bool:
        """Carry out `decide`'s verdict on the partial; True when the body should be streamed into it."""
        if isinstance(decision, Stream):
            if decision.restart:
                partial.restart(decision.restart)
            partial.learn(decision.total, decision.etag)
            return True
        if isinstance(decision, Complete):
            return False
        if isinstance(decision, Restart):
            partial.restart(decision.why)
            if decision.new_etag:
                partial.learn(None, decision.etag)
            raise Retry(decision.reason, decision.retry_after)
        if isinstance(decision, RetryLater):
            raise Retry(decision.reason, decision.retry_after)
        assert isinstance(decision, Fail)
        if decision.discard:
            partial.discard()
        raise decision.error

    def _trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            self._watch.attach(info["return_value"].get_extra_info("socket"))

    def _stream(self, response, partial: PartialFile) -> None:
        enlarge_socket_reads()  # also for a client the caller passed in
        broken = receive_body(response, partial, self._on_data)
        if broken is not None:
            self._interrupted(broken)
        if partial.total is not None and partial.done < partial.total:
            self.controls.raise_if_stopped(self.path)
            raise Retry(f"connection closed at {partial.done} of {partial.total} bytes")

    def _on_data(self, n: int, position: int) -> None:
        self._watch.touch()
        self.bytes_received += n
        self.reporting.emit(position, self.total)

    def _verify(self, partial: PartialFile) -> None:
        why = partial.mismatch()
        if why is not None:
            self._quarantine(partial.move_to, why)

    def _quarantine(self, move: Callable[[Path], None], why: str) -> NoReturn:
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = self.quarantine_dir / f"{self.dest.name}.{time.time_ns()}.quarantined"
        move(target)
        logger.error("integrity check failed for %s (%s); moved to %s", self.path, why, target)
        raise IntegrityError(
            f"{self.path} failed its integrity check ({why}). The damaged copy was moved to quarantine and "
            "will not be used; retry the download.",
            quarantined=str(target),
        )

    def _interrupted(self, exc: Exception) -> NoReturn:
        self.controls.raise_if_stopped(self.path)
        if self._watch.reason == "stall" or type(exc).__name__ == "ReadTimeout":
            raise Retry(f"no data for {self.options.stall_timeout_s:g} s") from None
        raise Retry(f"{type(exc).__name__}: {exc}") from None
