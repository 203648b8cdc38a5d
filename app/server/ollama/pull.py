"""Ollama's `POST /api/pull`, for the names Ollama itself uses to pull GGUFs from Hugging Face:
`hf.co/OWNER/REPO[:QUANT]`. The pull joins Hearth's own download queue (the app's Downloads page), is
verified by it, lands in the library, and is reported in Ollama's NDJSON status lines (security.md T45)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.core.downloads.items import DownloadItem, RemoteFile, State
from app.core.downloads.manager import DownloadManager
from app.core.formats import GGUF
from app.core.hub.client import HubClient, check_repo_id
from app.core.hub.errors import (
    HubError,
    HubGated,
    HubNotFound,
    HubOffline,
    HubRateLimited,
    HubRefused,
    HubUnauthorized,
)
from app.core.library.store import Library, LocalModel
from app.core.models.devices import Machine
from app.server.context import HUB_PREFIXES, ServerContext, hearth
from app.server.errors import APIError
from app.server.ollama.chat import NDJSON
from app.server.ollama.schemas import OllamaModelName

logger = logging.getLogger(__name__)
router = APIRouter()

ONLY_HUB = "Hearth pulls GGUF models from Hugging Face: use hf.co/OWNER/REPO[:QUANT]"
NO_PULLS = "pulling needs the Hearth app or `hearth serve` with a models folder"
POLL_S = 0.25  # at most four progress lines a second for the file in flight
_QUANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


class OllamaPullRequest(OllamaModelName):
    # Ollama's `insecure` skips TLS checks on its own registry; the Hub is always reached over HTTPS.
    insecure: bool = False
    stream: bool = True


def parse_pull_name(name: str) -> tuple[str, str | None]:
    """'hf.co/owner/repo:Q4_K_M' → ('owner/repo', 'Q4_K_M'); ':latest' or no tag → None (the recommended
    quant). Anything that is not a Hub model name is a 400."""
    text = name.strip()
    rest = next((text[len(p) :] for p in HUB_PREFIXES if text.lower().startswith(p)), None)
    if rest is None:
        raise APIError(ONLY_HUB, status=400)
    repo, _, tag = rest.partition(":")
    try:
        check_repo_id(repo)  # the same check every Hub call makes: owner/name, no '..'
    except HubNotFound as exc:
        raise APIError(f"{exc}; {ONLY_HUB}", status=400) from None
    if tag.lower() in ("", "latest"):
        return repo, None
    if not _QUANT.fullmatch(tag):
        raise APIError(f"{tag[:64]!r} is not a GGUF quant such as Q4_K_M", status=400)
    return repo, tag


def _hub_error(exc: HubError) -> APIError:
    """A Hub failure before any line was sent, as a status an Ollama client shows."""
    if isinstance(exc, HubNotFound):
        return APIError(str(exc), code="model_not_found", status=404)
    if isinstance(exc, (HubGated, HubUnauthorized)):
        return APIError(str(exc), "permission_error", status=403)
    if isinstance(exc, HubRateLimited):
        return APIError(str(exc), status=429)
    if isinstance(exc, HubRefused):
        return APIError(str(exc), status=400)
    return APIError(str(exc), "unavailable_error", status=503 if isinstance(exc, HubOffline) else 502)


def pick_variant(hub: HubClient, repo: str, quant: str | None, machine: Callable[[], Machine | None]) -> Any:
    """The GGUF variant to fetch: the named quant (any case), else the one recommended for this machine,
    as `hearth pull` chooses. Blocking (the Hub)."""
    if quant:
        from app.core.hub.variants import repo_variants

        choices = [c for c in repo_variants(hub, repo) if c.format == GGUF]
        hits = [c for c in choices if c.label.lower() == quant.lower()]
        if not hits:
            have = ", ".join(c.label for c in choices) or "no GGUF files"
            raise HubNotFound(f"{repo} has no {quant}; it offers: {have}")
        return hits[0].to_variant()
    from app.core.hub.metadata import assessable_variants
    from app.core.models.recommend import assess
    from app.core.runtime.preflight import live_machine

    variants = [v for v in assessable_variants(hub, repo) if v.format == GGUF]
    if not variants:
        raise HubRefused(f"{repo} has no GGUF files; Ollama's API pulls GGUFs only")
    rec = assess(variants, machine() or live_machine())
    if rec.recommended is None:
        raise HubRefused(f"no quant of {repo} runs on this machine: {rec.why}; name one, e.g. {repo}:Q4_K_M")
    return rec.recommended.variant


def _present(library: Library, repo: str, quant: str | None) -> LocalModel | None:
    """The ready library model this name already stands for (`repo:QUANT`, or the repo's only one)."""
    model = library.find(f"{repo}:{quant}" if quant else repo)
    return model if model is not None and model.ready and (model.repo_id or "").lower() == repo.lower() else None


def _landed(library: Library, manager: DownloadManager, item: DownloadItem) -> LocalModel:
    """The library entry of a finished download. The app's LibraryFeed (and `hearth serve`'s) adds it on
    the download's own thread, maybe just after `wait` returns; adding it here too is harmless (one entry
    per path)."""
    from app.core.library.from_downloads import add_to_library

    found = [library.find(str(manager.dest(item, f))) for f in item.files]
    model = next((m for m in found if m is not None), None)
    return model if model is not None else add_to_library(library, manager, item)


def ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def file_line(f: RemoteFile) -> dict[str, Any]:
    """Ollama's line for one layer; a file the Hub gives only a git sha1 for is named by its path."""
    done = (f.size or f.bytes_done) if f.done else f.bytes_done
    line: dict[str, Any] = {"status": f"pulling {f.sha256[:12] if f.sha256 else f.path}"}
    if f.sha256:
        line["digest"] = f"sha256:{f.sha256}"
    return line | {"total": f.size or 0, "completed": done}


class PullFailed(Exception):
    """The download ended without a verified model; the message is for the user."""


async def _finish(ctx: ServerContext, manager: DownloadManager, item_id: str) -> LocalModel:
    """Wait for the item to end; its library entry, or PullFailed saying why not."""
    state = await asyncio.to_thread(manager.wait, item_id, 1.0)
    while state is not None and state not in (State.DONE, State.FAILED, State.PAUSED):
        state = await asyncio.to_thread(manager.wait, item_id, 1.0)
    return await _result(ctx, manager, item_id, state)


async def _result(ctx: ServerContext, manager: DownloadManager, item_id: str, state: State | None) -> LocalModel:
    item = manager.get(item_id)
    if item is None or state is None:
        raise PullFailed("the download was cancelled in Hearth")
    if state == State.PAUSED:
        raise PullFailed(item.error or "the download was paused in Hearth; pull again to resume it")
    if state != State.DONE:
        raise PullFailed(item.error or f"the download is {state.value}")
    assert ctx.library is not None
    try:
        model = await asyncio.to_thread(_landed, ctx.library, manager, item)
    except (OSError, ValueError) as exc:
        raise PullFailed(f"the download could not be added to the library: {exc}") from None
    if not model.ready:
        raise PullFailed(f"{model.name} is not a usable model: {model.reason}")
    return model


async def _lines(ctx: ServerContext, manager: DownloadManager, item_id: str) -> AsyncIterator[bytes]:
    """The status lines of one pull. A client that leaves mid-pull stops only these lines: the download
    goes on in the queue (as Ollama's does), stays in the Downloads page and lands in the library."""
    yield ndjson({"status": "pulling manifest"})
    sent: dict[str, int] = {}
    while True:
        state = await asyncio.to_thread(manager.wait, item_id, POLL_S)
        item = manager.get(item_id)
        for f in item.files if item is not None else []:
            line = file_line(f)
            if sent.get(f.path) != line["completed"]:
                sent[f.path] = line["completed"]
                yield ndjson(line)
        if item is None or state not in (State.QUEUED, State.ACTIVE, State.VERIFYING):
            break
    try:
        yield ndjson({"status": "verifying sha256 digest"})  # each file was hashed as it arrived
        await _result(ctx, manager, item_id, state)
    except PullFailed as exc:
        yield ndjson({"error": str(exc)})
        return
    yield ndjson({"status": "writing manifest"})
    yield ndjson({"status": "success"})


def _success(stream: bool) -> Response:
    if stream:
        return Response(ndjson({"status": "success"}), media_type=NDJSON)
    return JSONResponse({"status": "success"})


@router.post("/api/pull")
async def pull(body: OllamaPullRequest, request: Request) -> Response:
    """Download `hf.co/OWNER/REPO[:QUANT]` into the library. Errors found before the first line (a bad
    name, no such repo or quant) are statuses; later ones, the stream's last line."""
    ctx = hearth(request)
    if ctx.hub is None or ctx.downloads is None or ctx.library is None:
        raise APIError(NO_PULLS, "not_supported_error", status=501)
    repo, quant = parse_pull_name(body.model)
    library = ctx.library
    if await asyncio.to_thread(_present, library, repo, quant) is not None:
        return _success(body.stream)
    hub = ctx.hub()
    resolver = ctx.resolver
    machine: Callable[[], Machine | None] = resolver.machine if resolver is not None else (lambda: None)
    downloads = ctx.downloads

    def plan() -> tuple[DownloadManager, str]:
        from app.core.downloads.resolve import queue_download, resolve_download

        plan = resolve_download(hub, pick_variant(hub, repo, quant, machine))
        manager = downloads()  # `hearth serve` opens its queue (a file read) on the first pull
        return manager, queue_download(manager, plan)

    try:
        manager, item_id = await asyncio.to_thread(plan)
    except HubError as exc:
        raise _hub_error(exc) from None
    except ValueError as exc:  # a file the queue will not write (its type or name)
        raise APIError(str(exc), status=400) from None
    logger.info("pull over the API: %s %s", repo, quant or "(recommended quant)")
    if body.stream:
        return StreamingResponse(_lines(ctx, manager, item_id), media_type=NDJSON)
    try:
        await _finish(ctx, manager, item_id)
    except PullFailed as exc:
        raise APIError(str(exc), "server_error", status=502) from None  # the Hub's download failed, not the body
    return JSONResponse({"status": "success"})


class OnDemandDownloads:
    """`hearth serve`'s download queue, opened by the first pull, so a serve that pulls nothing never
    rewrites the queue file the app shares; a LibraryFeed adds each finished download to the library, even
    one whose client left. Call it for the manager; `close()` on exit pauses what is unfinished."""

    def __init__(self, open_manager: Callable[[], DownloadManager], library: Library) -> None:
        self._open, self._library = open_manager, library
        self._lock = threading.Lock()
        self._manager: DownloadManager | None = None
        self._feed: Any = None

    def __call__(self) -> DownloadManager:
        from app.core.library.from_downloads import LibraryFeed

        with self._lock:
            if self._manager is None:
                self._manager = self._open()
                self._feed = LibraryFeed(self._manager, self._library)
            return self._manager

    def close(self) -> None:
        with self._lock:
            manager, self._manager = self._manager, None
            if self._feed is not None:
                self._feed.close()
            if manager is not None:
                manager.close()
