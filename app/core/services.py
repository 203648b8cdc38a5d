"""The long-lived core objects of a running Hearth, built and closed in one place (used by main.py)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.core.chat import ChatStore
from app.core.documents.service import Documents
from app.core.downloads import DownloadManager
from app.core.engines import default_registry
from app.core.engines.llamacpp.canary import recover_native_crashes
from app.core.engines.remote import RemoteStore, open_remotes, register_remote
from app.core.hub.client import HubClient
from app.core.library import Library
from app.core.library.from_downloads import LibraryFeed
from app.core.library.store import LocalModel
from app.core.mcp.servers import McpServers
from app.core.models.calibration import CalibrationStore
from app.core.paths import AppPaths
from app.core.runtime.drafts import DraftFinder
from app.core.runtime.pool import ModelPool
from app.core.runtime.resolve import ModelResolver
from app.core.settings import Settings, load_speculative

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 15.0  # past the engine's own 10 s and the MCP servers' 10 s: a close that hangs is a bug


@dataclass
class Services:
    paths: AppPaths
    settings: Settings
    library: Library
    downloads: DownloadManager
    pool: ModelPool  # every loaded model, each on an engine host of its own
    chats: ChatStore
    calibration: CalibrationStore
    resolver: ModelResolver
    remotes: RemoteStore
    env: dict[str, str] = field(default_factory=dict)
    feed: LibraryFeed | None = None
    # What died in native code last time, one sentence each (Services.open reads the in-flight markers).
    crash_notes: list[str] = field(default_factory=list)
    # The MCP servers of mcp.json, started when a chat first needs one.
    tools: McpServers | None = None
    # The user's document collections (the Documents page, the chat's Documents menu, the API's vector stores).
    documents: Documents | None = None

    @classmethod
    def open(cls, paths: AppPaths, settings: Settings, *, env: dict[str, str] | None = None) -> Services:
        env = dict(os.environ if env is None else env)
        models = settings.models_path(paths)
        models.mkdir(parents=True, exist_ok=True)
        calibration = CalibrationStore(paths.calibration_file)
        library = Library(models, paths.library_db)
        hub = HubClient.from_settings(settings, env=env)
        downloads = DownloadManager(
            models,
            paths.downloads_state,
            max_parallel=settings.parallel_downloads,
            token=hub.token,
            endpoint=hub.endpoint,
        )
        remotes = open_remotes(paths)
        resolver = ModelResolver(
            library,
            max_context=settings.server.jit_context,
            remotes=remotes,
            max_slots=settings.parallel_requests,
            speculative=load_speculative(settings.speculative),
            deterministic=settings.deterministic,
            drafts=DraftFinder(library),
        )
        pool = ModelPool(
            register_remote(default_registry(), remotes),
            calibration=calibration,
            resolver=resolver,
            jit=settings.server.jit_load,
            queue_size=settings.server.queue_size,
            idle_ttl_s=settings.server.idle_ttl_minutes * 60 or None,
            max_models=settings.server.max_loaded_models,
        )
        chats = ChatStore(paths.chats_db)
        services = cls(paths, settings, library, downloads, pool, chats, calibration, resolver, remotes, env)
        # Before anything loads: a native crash last time is recorded, so that configuration is not used again.
        services.crash_notes = recover_native_crashes()
        services.feed = LibraryFeed(downloads, library)
        services.tools = McpServers(paths.config, log_dir=paths.logs)  # a broken mcp.json: none, and why
        services.documents = Documents.on_pool(
            paths.documents_db, pool, resolver, settings=lambda: services.settings.documents
        )
        resolver.draft_for = services.draft_for
        resolver.template_for = services.template_for
        return services

    def draft_for(self, model: LocalModel) -> str | None:
        """Any thread: the draft model picked for `model` (Settings.draft_models), if any."""
        return self.settings.draft_models.get(model.id)

    def template_for(self, model: LocalModel) -> str | None:
        """Any thread: the chat template picked for `model` (Settings.chat_templates), if any."""
        return self.settings.chat_templates.get(model.id) or None

    def hub(self) -> HubClient:
        """A Hub client for the current settings (token and mirror can change while Hearth runs)."""
        return HubClient.from_settings(self.settings, env=self.env)

    def apply_settings(self, settings: Settings) -> None:
        """Any thread: a new token, mirror or parallelism applies to downloads started from now on."""
        self.settings = settings
        client = self.hub()
        self.downloads.token = client.token
        self.downloads.endpoint = client.endpoint
        self.downloads.set_max_parallel(settings.parallel_downloads)
        self.pool.jit = settings.server.jit_load
        self.resolver.max_context = settings.server.jit_context
        self.resolver.deterministic = settings.deterministic
        self.resolver.max_slots = settings.parallel_requests  # the next load plans for it
        self.resolver.speculative = load_speculative(settings.speculative)
        self.pool.queue_size = settings.server.queue_size
        self.pool.idle_ttl_s = settings.server.idle_ttl_minutes * 60 or None
        self.pool.max_models = settings.server.max_loaded_models

    def start(self) -> None:
        """A background thread, after the window shows: catch up the library, resume unfinished downloads."""
        if self.feed is not None:
            self.feed.start()
        if self.documents is not None:
            self.documents.start()  # what changed in watched folders while Hearth was closed; resumes a stopped run

    def close(self) -> None:
        """The feed stops taking finished downloads; then the MCP servers, the downloads (paused, their
        partials kept for the next launch) and the engine stop at once, each waiting on something of its own
        (a server process's exit, a worker's pause, the models' unload), so quitting takes the slowest of
        them, not their sum; then the stores close."""
        self._close_step("library feed", self.feed.close if self.feed else (lambda: None))
        # Before the pool: its run stops between two batches instead of failing on a closed engine.
        self._close_step("documents", self.documents.close if self.documents else (lambda: None))
        at_once: list[tuple[str, Callable[[], object]]] = [
            ("engine host", self.pool.shutdown),
            ("MCP servers", self.tools.close if self.tools else (lambda: None)),
            ("downloads", self.downloads.close),
        ]
        threads = [
            threading.Thread(target=self._close_step, args=step, name=f"hearth-close-{i}", daemon=True)
            for i, step in enumerate(at_once)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S  # each step bounds its own wait; this guards against a bug
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for step in (("library", self.library.close), ("chats", self.chats.close)):
            self._close_step(*step)

    @staticmethod
    def _close_step(name: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception:  # one failing close must not keep the others from running
            logger.exception("closing the %s failed", name)
