"""The download queue: files and variants, their states, persistence across restarts, N parallel workers.

Threads: public methods may be called from any thread. `changed`, `removed` and `progress` are emitted on
worker threads (or on the caller's thread for pause/cancel of an idle item); a Qt view must re-post to its own.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.atomic import atomic_write_text
from app.core.downloads.downloader import DISK_MARGIN, FileDownload
from app.core.downloads.errors import DiskFullError, DownloadCancelled, DownloadError, DownloadPaused
from app.core.downloads.items import UNFINISHED, DownloadItem, Progress, RemoteFile, State
from app.core.downloads.items import eta as _eta
from app.core.downloads.partial import partial_paths
from app.core.downloads.paths import check_file_type, destination, repo_folder
from app.core.downloads.progress import Reporting
from app.core.downloads.spec import Controls, DownloadOptions, Source, Target
from app.core.events import Event
from app.core.hub.urls import DEFAULT_ENDPOINT, resolve_url

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

STATE_VERSION = 1
SAVE_INTERVAL_S = 2.0


class DownloadManager:
    """Downloads into `models_dir`, the queue persisted in `state_file`.

    `download_options` (a `DownloadOptions`, or its flat keys such as `stall_timeout_s` and `max_retries`)
    applies to every file; `token` and `endpoint` may be changed between downloads.
    """

    def __init__(
        self,
        models_dir: Path,
        state_file: Path,
        *,
        max_parallel: int = 2,
        client_factory: Callable[[], httpx.Client] | None = None,
        token: str | None = None,
        endpoint: str = DEFAULT_ENDPOINT,
        download_options: DownloadOptions | Mapping[str, Any] | None = None,
    ) -> None:
        self.models_dir = Path(models_dir)
        self.state_file = Path(state_file)
        self.max_parallel = max(1, int(max_parallel))
        self.client_factory = client_factory
        self.token = token
        self.endpoint = endpoint.rstrip("/")
        self.download_options = DownloadOptions.of(download_options)
        self.changed: Event[DownloadItem] = Event("downloads.changed")
        self.removed: Event[str] = Event("downloads.removed")
        self.progress: Event[Progress] = Event("downloads.progress")
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._items: dict[str, DownloadItem] = {}
        self._controls: dict[str, Controls] = {}
        self._futures: dict[str, Future] = {}
        self._downloads: dict[tuple[str, str], FileDownload] = {}  # kept so a resume reuses the hash state
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="download")
        self._closed = False
        self._last_save = 0.0
        self._load()

    # ---- queue ----

    def add_variant(
        self, repo_id: str, files: list[RemoteFile], *, commit: str = "", revision: str = "main", label: str = ""
    ) -> str:
        """Queue files to land in `models_dir/<repo_folder>/`; every name is checked before anything is written."""
        folder = repo_folder(repo_id, revision)
        for f in files:
            check_file_type(f.path)
            destination(self.models_dir, f"{folder}/{f.path}")
            if not (f.sha256 or f.git_sha1):
                raise ValueError(f"{f.path}: a sha256 or git sha1 is needed to verify the download")
        item = DownloadItem(
            uuid.uuid4().hex[:12],
            repo_id,
            commit,
            revision,
            label or files[0].path,
            [copy.copy(f) for f in files],
            folder,
        )
        with self._lock:
            self._items[item.id] = item
            self._controls[item.id] = Controls()
        self._changed(item)
        self._schedule()
        return item.id

    def add_file(self, repo_id: str, file: RemoteFile, **kwargs) -> str:
        return self.add_variant(repo_id, [file], **kwargs)

    def items(self) -> list[DownloadItem]:
        with self._lock:
            return [copy.deepcopy(i) for i in sorted(self._items.values(), key=lambda i: i.added_at)]

    def get(self, item_id: str) -> DownloadItem | None:
        with self._lock:
            item = self._items.get(item_id)
            return copy.deepcopy(item) if item else None

    def dest(self, item: DownloadItem, f: RemoteFile) -> Path:
        return destination(self.models_dir, f"{item.folder}/{f.path}")

    # ---- controls ----

    def pause(self, item_id: str) -> None:
        with self._lock:
            item = self._items.get(item_id)
            if item is None or item.state not in UNFINISHED:
                return
            self._controls[item_id].pause.set()
            if item_id in self._futures:
                return  # the worker stops within ~0.1 s and records PAUSED
            item.state, item.error = State.PAUSED, ""
        self._changed(item)

    def resume(self, item_id: str) -> None:
        with self._lock:
            item = self._items.get(item_id)
            if item is None or item.state not in (State.PAUSED, State.FAILED) or item_id in self._futures:
                return
            controls = self._controls[item_id]
            controls.cancel.clear()
            controls.pause.clear()
            item.state, item.error = State.QUEUED, ""
        self._changed(item)
        self._schedule()

    def resume_all(self) -> None:
        """Restart every paused download (those interrupted by the last exit come back paused)."""
        for item in self.items():
            if item.state == State.PAUSED:
                self.resume(item.id)

    def cancel(self, item_id: str) -> None:
        """Stop and forget the item; its partial files are deleted (finished files of a variant stay)."""
        with self._lock:
            item = self._items.get(item_id)
            if item is None:
                return
            self._controls[item_id].cancel.set()
            if item_id in self._futures:
                return  # the worker deletes the partial it holds the lock for, then drops the item
        self._drop(item, delete_partials=True)

    def set_max_parallel(self, n: int) -> None:
        self.max_parallel = max(1, int(n))
        self._schedule()

    def wait(self, item_id: str, timeout: float | None = None) -> State | None:
        """Block until the item is done, failed, paused or removed (None); for the CLI and tests."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                item = self._items.get(item_id)
                if item is None or (item.state not in UNFINISHED and item_id not in self._futures):
                    return item.state if item else None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return item.state
                self._cond.wait(left)

    def close(self, timeout: float = 5.0) -> None:
        """Pause the active downloads (partials kept, state saved) and stop the workers."""
        with self._lock:
            self._closed = True
            futures = list(self._futures.values())
            for item_id in self._futures:
                self._controls[item_id].pause.set()
        wait_futures(futures, timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._save(force=True)

    # ---- workers ----

    def _schedule(self) -> None:
        started = []
        with self._lock:
            if self._closed:
                return
            queued = sorted((i for i in self._items.values() if i.state == State.QUEUED), key=lambda i: i.added_at)
            for item in queued:
                if len(self._futures) >= self.max_parallel:
                    break
                item.state = State.ACTIVE
                started.append(item)
                self._futures[item.id] = self._pool.submit(self._work, item.id)
        for item in started:
            self._changed(item)

    def _work(self, item_id: str) -> None:
        with self._lock:
            item = self._items[item_id]
            controls = self._controls[item_id]
        try:
            self._check_space(item)
            for f in item.files:
                if not f.done:
                    self._fetch_one(item, f, controls)
            self._finish(item, State.DONE, "")
        except DownloadCancelled:
            self._drop(item, delete_partials=True)
        except DownloadPaused:
            self._finish(item, State.PAUSED, "")
        except DiskFullError as exc:
            self._finish(item, State.PAUSED if exc.partial_kept else State.FAILED, str(exc))
        except DownloadError as exc:
            self._finish(item, State.FAILED, str(exc))
        except Exception as exc:  # a bug must surface as a failed download, not a dead worker
            logger.exception("download %s failed unexpectedly", item.label)
            self._finish(item, State.FAILED, f"Unexpected error: {exc}")

    def _fetch_one(self, item: DownloadItem, f: RemoteFile, controls: Controls) -> None:
        key = (item.id, f.path)
        dl = self._downloads.get(key)
        if dl is None:
            url = resolve_url(self.endpoint, item.repo_id, f.path, item.commit or item.revision)
            dl = FileDownload(
                Source(
                    url,
                    f.path,
                    sha256=f.sha256,
                    git_sha1=f.git_sha1,
                    size=f.size,
                    repo_id=item.repo_id,
                    commit=item.commit,
                ),
                Target(self.dest(item, f), self.models_dir),
                options=self.download_options,
                controls=controls,
                reporting=Reporting(
                    lambda done, total, rate: self._on_progress(item, f, done, total, rate),
                    lambda phase: self._on_phase(item, phase),
                ),
                token=self.token,
            )
            self._downloads[key] = dl
        client = self.client_factory() if self.client_factory else None
        try:
            dl.run(client)
        finally:
            if client is not None:
                client.close()
        with self._lock:
            f.done, f.bytes_done = True, f.size or dl.total or 0
            self._downloads.pop(key, None)
            if item.state == State.VERIFYING:
                item.state = State.ACTIVE
        self._changed(item)

    def _check_space(self, item: DownloadItem) -> None:
        """The whole variant must fit before its first shard starts (T12)."""
        remaining = 0
        for f in item.files:
            if f.done or f.size is None:
                continue
            part, _ = partial_paths(self.dest(item, f))
            remaining += max(0, f.size - (part.stat().st_size if part.exists() else 0))
        probe = self.models_dir if self.models_dir.exists() else self.models_dir.parent
        free = shutil.disk_usage(probe).free
        if remaining and free < remaining + DISK_MARGIN:
            raise DiskFullError(item.label, remaining + DISK_MARGIN, free)

    def _on_phase(self, item: DownloadItem, phase: str) -> None:
        with self._lock:
            if phase != "verifying" or item.state != State.ACTIVE:
                return
            item.state = State.VERIFYING
        self._changed(item)

    def _on_progress(self, item: DownloadItem, f: RemoteFile, done: int, total: int, rate: float) -> None:
        with self._lock:
            f.bytes_done = done
            if item.state == State.VERIFYING:
                item.state = State.ACTIVE
                changed = True
            else:
                changed = False
            item_done, item_total = item.bytes_done, item.total
        if changed:
            self._changed(item)
        self.progress.emit(
            Progress(
                item.id,
                f.path,
                done,
                total,
                rate,
                _eta(total - done, rate),
                item_done,
                item_total,
                rate,
                _eta(item_total - item_done, rate),
            )
        )
        self._save()

    def _finish(self, item: DownloadItem, state: State, error: str) -> None:
        with self._lock:
            item.state, item.error = state, error
            self._futures.pop(item.id, None)
        if error:
            logger.warning("download %s: %s", item.label, error)
        self._changed(item)
        self._schedule()

    def _drop(self, item: DownloadItem, delete_partials: bool) -> None:
        with self._lock:
            self._items.pop(item.id, None)
            self._controls.pop(item.id, None)
            self._futures.pop(item.id, None)
            for f in item.files:
                self._downloads.pop((item.id, f.path), None)
        if delete_partials:
            for f in item.files:
                if not f.done:
                    for path in partial_paths(self.dest(item, f)):
                        path.unlink(missing_ok=True)
        self._save(force=True)
        with self._cond:
            self._cond.notify_all()
        self.removed.emit(item.id)
        self._schedule()

    def _changed(self, item: DownloadItem) -> None:
        self._save(force=True)
        with self._cond:
            self._cond.notify_all()
        self.changed.emit(copy.deepcopy(item))

    # ---- persistence ----

    def _save(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last_save < SAVE_INTERVAL_S:
                return
            self._last_save = now
            items = [asdict(i) | {"state": i.state.value} for i in self._items.values()]
            atomic_write_text(self.state_file, json.dumps({"version": STATE_VERSION, "items": items}, indent=1))

    def _load(self) -> None:
        try:
            raw = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            logger.warning("unreadable download state %s; starting with an empty queue", self.state_file)
            return
        for entry in raw.get("items", []):
            try:
                files = [RemoteFile(**f) for f in entry.pop("files")]
                item = DownloadItem(files=files, **{**entry, "state": State(entry["state"])})
            except (KeyError, TypeError, ValueError):
                logger.warning("skipping an unreadable entry in %s", self.state_file)
                continue
            if item.state in UNFINISHED:
                item.state = State.PAUSED  # interrupted by the last exit; `resume_all()` restarts it
            self._items[item.id] = item
            self._controls[item.id] = Controls()
