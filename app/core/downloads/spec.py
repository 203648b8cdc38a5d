"""What a `FileDownload` fetches, where it puts it, how it retries, and the events that stop it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.downloads.errors import DownloadCancelled, DownloadPaused
from app.core.downloads.retry import RetryPolicy


@dataclass(frozen=True)
class Source:
    """One file on the Hub, verified against `sha256` (LFS) or, for small non-LFS files, its git blob sha1.

    `path` is the name inside the repo (checked before anything is written); `size` is what the Hub's
    metadata promised, and a server that now reports another size means the file changed.
    """

    url: str
    path: str
    sha256: str | None = None
    git_sha1: str | None = None
    size: int | None = None
    repo_id: str = ""
    commit: str = ""

    def __post_init__(self) -> None:
        if not (self.sha256 or self.git_sha1):
            raise ValueError("a download needs the file's sha256 or git sha1 to verify it")
        # With a sha256 the git sha1 is never used: one hash decides.
        object.__setattr__(self, "sha256", self.sha256.lower() if self.sha256 else None)
        object.__setattr__(self, "git_sha1", None if self.sha256 else (self.git_sha1 or "").lower())

    @property
    def digest(self) -> str:
        """The hex digest the downloaded bytes must hash to."""
        return self.sha256 or self.git_sha1 or ""  # never "": __post_init__ requires one

    @property
    def algorithm(self) -> str:
        return "sha256" if self.sha256 else "git sha1"


@dataclass(frozen=True)
class Target:
    """`dest` must lie inside `root` (the models folder, by default `dest`'s folder) with no symlink on the way;
    a file that fails verification goes to `quarantine_dir` (by default `root/quarantine`)."""

    dest: Path
    root: Path | None = None
    quarantine_dir: Path | None = None

    def __post_init__(self) -> None:
        dest = Path(self.dest)
        root = Path(self.root) if self.root is not None else dest.parent
        quarantine = Path(self.quarantine_dir) if self.quarantine_dir else root / "quarantine"
        object.__setattr__(self, "dest", dest)
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "quarantine_dir", quarantine)


@dataclass(frozen=True)
class DownloadOptions:
    """How hard to try: the retry policy, and how long a read may bring no byte before the request is ended."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    stall_timeout_s: float = 30.0

    @classmethod
    def of(cls, options: DownloadOptions | Mapping[str, Any] | None) -> DownloadOptions:
        """Options as given, or from flat keys (`stall_timeout_s` and the `RetryPolicy` fields), as settings
        and tests write them; an unknown key is a TypeError."""
        if options is None:
            return cls()
        if isinstance(options, DownloadOptions):
            return options
        flat = dict(options)
        stall = flat.pop("stall_timeout_s", cls.stall_timeout_s)
        return cls(RetryPolicy(**flat), stall)


class Controls:
    """The events another thread sets to stop a download: `cancel` (partials deleted) or `pause` (kept)."""

    def __init__(self, cancel: threading.Event | None = None, pause: threading.Event | None = None) -> None:
        self.cancel = cancel or threading.Event()
        self.pause = pause or threading.Event()

    def stopping(self) -> bool:
        """Any thread (the watchdog and the lock poll it)."""
        return self.cancel.is_set() or self.pause.is_set()

    def raise_if_stopped(self, path: str) -> None:
        if self.cancel.is_set():
            raise DownloadCancelled(path)
        if self.pause.is_set():
            raise DownloadPaused(path)

    def sleep(self, seconds: float, path: str) -> None:
        """Wait, but raise within ~0.05 s of a cancel or pause."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.raise_if_stopped(path)
            self.cancel.wait(min(0.05, left))
        self.raise_if_stopped(path)
