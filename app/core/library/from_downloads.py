"""A finished, verified download becomes a library entry (and catches up after a restart)."""

from __future__ import annotations

import logging
from pathlib import Path, PurePosixPath

from app.core.downloads.items import DownloadItem, State
from app.core.downloads.manager import DownloadManager
from app.core.formats import EXL2, GGUF, MLX
from app.core.library.importers import gguf_problem
from app.core.library.store import Library, ModelFile

logger = logging.getLogger(__name__)


def item_format(item: DownloadItem) -> str:
    from app.core.models.exl2 import parse_bpw

    if any(f.path.lower().endswith(".gguf") for f in item.files):
        return GGUF
    return EXL2 if parse_bpw(item.revision) else MLX


def add_to_library(library: Library, manager: DownloadManager, item: DownloadItem):
    """Record a finished (verified) download in the library; the model file comes first, mmproj after."""
    files = sorted(item.files, key=lambda f: "mmproj" in PurePosixPath(f.path).name.lower())
    records = [
        ModelFile(manager.dest(item, f), int(f.size or manager.dest(item, f).stat().st_size), f.sha256) for f in files
    ]
    fmt = item_format(item)
    quant = item.label if fmt == GGUF else None
    path = None if fmt == GGUF else manager.models_dir / item.folder
    # A verified download can still be no model (a vocabulary-only GGUF): quarantined, with the reason.
    problem = None
    if fmt == GGUF:
        problem = gguf_problem([Path(r.path) for r in records if "mmproj" not in Path(r.path).name.lower()])
    return library.add_download(
        repo_id=item.repo_id,
        commit=item.commit,
        format=fmt,
        quant=quant,
        files=records,
        path=path,
        verified=problem is None,
        reason=problem or "",
    )


def sync_finished(library: Library, manager: DownloadManager) -> int:
    """Add done downloads the library lacks (e.g. the app stopped between the two); returns how many."""
    added = 0
    for item in manager.items():
        if item.state != State.DONE or not item.files:
            continue
        first = manager.dest(item, item.files[0])
        if library.find(str(first)) is None and all(manager.dest(item, f).exists() for f in item.files):
            add_to_library(library, manager, item)
            added += 1
    return added


class LibraryFeed:
    """Ties the download queue to the library: each verified download lands there by itself."""

    def __init__(self, manager: DownloadManager, library: Library) -> None:
        self.manager = manager
        self.library = library
        self._unsubscribe = manager.changed.connect(self._on_changed)

    def _on_changed(self, item: DownloadItem) -> None:
        """A download worker thread calls this; both sides are thread-safe core objects."""
        if item.state == State.DONE:
            try:
                add_to_library(self.library, self.manager, item)
            except (OSError, ValueError):
                logger.exception("could not add %s %s to the library", item.repo_id, item.label)

    def start(self) -> None:
        """A background thread: catch up on finished downloads, then resume the unfinished ones."""
        sync_finished(self.library, self.manager)
        self.manager.resume_all()

    def close(self) -> None:
        self._unsubscribe()
