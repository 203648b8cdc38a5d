"""The download queue's data: item states, the files of an item, and the progress events it emits."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum


class State(str, Enum):
    QUEUED = "queued"
    ACTIVE = "active"
    PAUSED = "paused"
    FAILED = "failed"
    VERIFYING = "verifying"
    DONE = "done"


UNFINISHED = (State.QUEUED, State.ACTIVE, State.VERIFYING)


@dataclass
class RemoteFile:
    """One file to fetch. LFS files carry `sha256`; small non-LFS files the git blob sha1 (`blobId`)."""

    path: str
    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None
    done: bool = False
    bytes_done: int = 0


@dataclass
class DownloadItem:
    """A variant (several files, e.g. a split GGUF set and its mmproj) or a single file, downloaded in order."""

    id: str
    repo_id: str
    commit: str
    revision: str
    label: str
    files: list[RemoteFile]
    folder: str  # relative to the models folder
    state: State = State.QUEUED
    error: str = ""  # plain words for failed or paused-by-error items
    added_at: float = field(default_factory=time.time)

    @property
    def total(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def bytes_done(self) -> int:
        return sum((f.size or 0) if f.done else f.bytes_done for f in self.files)


@dataclass(frozen=True)
class Progress:
    """Bytes/s and ETA (seconds, None when unknown) for the file in flight and for its whole item."""

    item_id: str
    path: str
    file_done: int
    file_total: int
    file_rate: float
    file_eta: float | None
    done: int
    total: int
    rate: float
    eta: float | None


def eta(remaining: int, rate: float) -> float | None:
    return remaining / rate if rate > 0 and remaining >= 0 else None
