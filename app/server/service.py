"""The API server as the app runs it: started from the Server page or at launch (a setting), restarted
when its settings change, stopped first when Hearth quits. Qt-free; `changed` fires on the thread that
started or stopped it."""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.events import Event
from app.core.library.store import Library
from app.core.runtime.job_host import JobHost
from app.core.runtime.resolve import ModelResolver
from app.core.settings import OLLAMA_PORT, ServerSettings
from app.server.keys import new_api_key
from app.server.request_log import RequestLog
from app.server.responses.store import ResponseStore

if TYPE_CHECKING:
    from app.core.documents.service import Documents
    from app.core.downloads.manager import DownloadManager
    from app.core.hub.client import HubClient
    from app.server.remote_forward import RemotePool
    from app.server.runner import ServerThread

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    url: str = ""  # the base URL clients use, ending in /v1
    error: str = ""  # why the last start failed
    ollama_url: str = ""  # the second listener on Ollama's port (ServerSettings.ollama_port), when it runs
    ollama_error: str = ""  # why that listener is not there, while the main one runs


def start_ollama_listener(
    app: object, host: str, port: int, main_port: int, cancel_open: Callable[[], int] | None = None
) -> tuple[ServerThread | None, str]:
    """The same app also listening on `port` (Ollama's): the runner, or None and why not. A port in use is
    no failure of the server: Ollama itself is likely there, and the main port still serves its routes."""
    from app.server.runner import ServerError, ServerThread

    runner = ServerThread(app, host, port, cancel_open)
    try:
        runner.start()
    except ServerError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
            text = f"Port {port} is in use (is Ollama running?); Ollama's routes are still on port {main_port}"
        else:
            text = f"Could not also listen on port {port} ({exc}); Ollama's routes are still on port {main_port}"
        logger.info("%s", text)  # the status says it (the CLI a note): a warning would say it twice
        return None, text
    return runner, ""


class ApiService:
    """`start()` / `stop()` from any thread; `status` and `changed(ServerStatus)` say what it is doing."""

    def __init__(
        self,
        host: JobHost,
        library: Library,
        resolver: ModelResolver,
        settings: Callable[[], ServerSettings],
        save_key: Callable[[str], None] | None = None,
        responses_file: Path | None = None,
        hub: Callable[[], HubClient] | None = None,
        downloads: Callable[[], DownloadManager] | None = None,
        *,
        ollama_port: int = OLLAMA_PORT,
        documents: Documents | None = None,
        uploads: Path | None = None,
    ) -> None:
        """`settings()` gives the current Server settings; `save_key(key)` stores a key made for LAN mode;
        `responses_file` is where stored responses go when the user keeps them across restarts; `hub()` and
        `downloads()` let /api/pull fetch into the app's download queue (its LibraryFeed adds the result);
        `ollama_port` is where the setting of that name listens too (tests pass a free one); `documents` (the
        app's, shared with the window) backs /v1/files and /v1/vector_stores, with uploads kept in `uploads`."""
        self.documents, self.uploads = documents, uploads
        self.host, self.library, self.resolver = host, library, resolver
        self.hub, self.downloads = hub, downloads
        self.ollama_port = ollama_port
        self.settings, self.save_key = settings, save_key
        self.log = RequestLog()
        self.responses_file = responses_file
        # Outlives each server start, so a restart for a settings change keeps previous_response_id working.
        self.responses = ResponseStore(self._responses_path(settings()))
        self.changed: Event[ServerStatus] = Event("server.changed")
        self.status = ServerStatus(False)
        self._lock = threading.Lock()
        self._runner: ServerThread | None = None
        self._ollama: ServerThread | None = None  # the listener on Ollama's port, when on and free
        self._remotes: RemotePool | None = None

    def start(self) -> ServerStatus:
        # FastAPI and the routes are imported on the first start, not with the window: they take ~0.3 s.
        from app.core.documents.vector_stores import VectorStores
        from app.server.app import create_app
        from app.server.config import bind_address, policy_for
        from app.server.context import ServerContext
        from app.server.remote_forward import RemotePool
        from app.server.runner import ServerError, ServerThread
        from app.server.web_images import WebImageFetcher

        with self._lock:
            if self._runner is not None:
                return self.status
            settings = self.settings()
            if settings.key_required and not settings.api_key:
                settings = settings.model_copy(update={"api_key": new_api_key()})
                if self.save_key is not None:
                    self.save_key(settings.api_key)
            self.responses.persist(self._responses_path(settings))
            # Remote models the user exposes are forwarded, each on hosts of its own (remote_forward.py).
            store = self.resolver.remotes
            self._remotes = RemotePool(store) if store is not None else None
            context = ServerContext(
                self.host,
                self.library,
                self.resolver,
                self.log,
                responses=self.responses,
                remotes=self._remotes,
                hub=self.hub,
                downloads=self.downloads,
                web_images=WebImageFetcher() if settings.fetch_image_urls else None,
                stores=VectorStores.over(self.documents, self.uploads) if self.documents is not None else None,
            )
            app = create_app(context, policy_for(settings))
            runner = ServerThread(app, bind_address(settings), settings.port, context.cancel_streams)
            try:
                runner.start()
            except ServerError as exc:
                logger.warning("the API server could not start: %s", exc)
                self._close_remotes()
                self.status = ServerStatus(False, error=str(exc))
            else:
                self._runner = runner
                shown = runner.url.replace("0.0.0.0", "127.0.0.1")  # a URL this machine can open
                ollama_url = ollama_error = ""
                if settings.ollama_port:
                    self._ollama, ollama_error = start_ollama_listener(
                        app, bind_address(settings), self.ollama_port, runner.port, context.cancel_streams
                    )
                    if self._ollama is not None:
                        ollama_url = self._ollama.url.replace("0.0.0.0", "127.0.0.1")
                self.status = ServerStatus(True, shown + "/v1", ollama_url=ollama_url, ollama_error=ollama_error)
            status = self.status
        self.changed.emit(status)
        return status

    def _responses_path(self, settings: ServerSettings) -> Path | None:
        return self.responses_file if settings.keep_responses else None

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            runner, self._runner = self._runner, None
            ollama, self._ollama = self._ollama, None
            if ollama is not None:
                ollama.stop(timeout)
            if runner is not None:
                runner.stop(timeout)
            self._close_remotes()
            self.status = ServerStatus(False)
            status = self.status
        if runner is not None:
            self.changed.emit(status)

    def _close_remotes(self) -> None:
        pool, self._remotes = self._remotes, None
        if pool is not None:
            pool.close()

    def restart(self) -> ServerStatus:
        """Apply changed settings (port, bind, key, origins) to a running server."""
        if self._runner is None:
            return self.status
        self.stop()
        return self.start()
