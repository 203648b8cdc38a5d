"""What a chosen variant means in files: exact paths with the hashes to verify them, pinned to a commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.core.downloads.items import RemoteFile, State
from app.core.downloads.manager import DownloadManager
from app.core.formats import GGUF
from app.core.hub.client import HubClient
from app.core.hub.errors import HubError, HubNotFound
from app.core.hub.names import is_allowed_file, refuse_pickle_only
from app.core.hub.variants import folder_files, gguf_choices
from app.core.models.recommend import Variant

logger = logging.getLogger(__name__)


@dataclass
class PlannedDownload:
    """A variant resolved to exact files (each with its sha256 or git sha1), pinned to a commit."""

    repo_id: str
    revision: str
    commit: str
    label: str
    format: str
    files: list[RemoteFile]

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)


def resolve_download(client: HubClient, variant: Variant) -> PlannedDownload:
    """Which files make up `variant` in its repo, with hashes to verify them. Runs on a worker thread."""
    if not variant.repo_id:
        raise HubNotFound(f"{variant.label} is a local model; there is nothing to download")
    revision = variant.revision or "main"
    details = client.model(variant.repo_id, revision)
    commit = details.sha
    refuse_pickle_only(variant.repo_id, [f.path for f in details.files])
    allowed = [f for f in details.files if is_allowed_file(f.path)]
    by_path = {f.path: f for f in allowed}
    if variant.files:
        missing = [p for p in variant.files if p not in by_path]
        if missing:
            raise HubNotFound(f"{variant.repo_id} no longer has {', '.join(missing)}; open the model again")
        chosen = [by_path[p] for p in variant.files]
    elif variant.format == GGUF:
        matches = [
            c for c in gguf_choices(variant.repo_id, allowed, commit) if c.label.lower() == variant.label.lower()
        ]
        if not matches:
            raise HubNotFound(f"{variant.repo_id} has no {variant.label} GGUF file")
        chosen = matches[0].files
    else:  # MLX and EXL2: the model folder the (branch of the) repo holds
        chosen = folder_files(allowed)
    remote = []
    for f in chosen:
        if f.sha256:
            remote.append(RemoteFile(f.path, f.size, sha256=f.sha256))
        elif f.blob_id:
            remote.append(RemoteFile(f.path, f.size, git_sha1=f.blob_id))
        else:
            raise HubError(f"the Hub gave no checksum for {f.path}, so Hearth cannot verify it")
    return PlannedDownload(variant.repo_id, revision, commit, variant.label, variant.format, remote)


def queue_download(manager: DownloadManager, plan: PlannedDownload) -> str:
    """Add the plan to the queue; the same variant already queued, paused, failed or done is reused instead."""
    for item in manager.items():
        if (item.repo_id, item.commit, item.label) != (plan.repo_id, plan.commit, plan.label):
            continue
        if item.state in (State.PAUSED, State.FAILED):
            manager.resume(item.id)
            return item.id
        if item.state != State.DONE or all(manager.dest(item, f).exists() for f in item.files):
            return item.id
        manager.cancel(item.id)  # done once, files deleted since: forget it and fetch again
    return manager.add_variant(plan.repo_id, plan.files, commit=plan.commit, revision=plan.revision, label=plan.label)
