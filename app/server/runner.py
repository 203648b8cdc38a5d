"""uvicorn on its own thread and event loop: start (the socket is bound before it returns, so a port in
use is an error at once), ready, the bound port, stop within seconds even with streams open."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from app.core.errors import HearthError

logger = logging.getLogger(__name__)

GRACEFUL_S = 1  # streams left when stop() is called get this long after their jobs are cancelled


class ServerError(HearthError):
    """The server could not start (the port is taken, the address is not this machine's)."""


class ServerThread:
    """`start()` binds and serves on a thread named "hearth-server"; `stop()` ends it and frees the port."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        cancel_open: Callable[[], int] | None = None,
        *,
        header_timeout_s: float | None = None,
        max_connections: int | None = None,
        limit_concurrency: int | None = None,
    ) -> None:
        """`cancel_open()` cancels the jobs of requests still open (ServerContext.cancel_streams). The limits
        default to connections.py's (security.md T41); tests pass small ones."""
        from app.server import connections

        self.app, self.host, self.port = app, host, port
        self.cancel_open = cancel_open
        self.header_timeout_s = header_timeout_s if header_timeout_s is not None else connections.HEADER_TIMEOUT_S
        self.max_connections = max_connections or connections.default_max_connections()
        self.limit_concurrency = limit_concurrency or connections.LIMIT_CONCURRENCY
        self.ready = threading.Event()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._quiet: logging.Filter | None = None  # on uvicorn's logger while serving
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> int:
        """Bind, start serving, wait until it accepts connections; returns the bound port."""
        import uvicorn

        from app.server.connections import BACKLOG, QuietWarnings, protocol_class

        if self.running:
            return self.port
        self._socket = self._bind()
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=GRACEFUL_S,
            timeout_keep_alive=5,
            h11_max_incomplete_event_size=64 * 1024,  # request line + headers
            http=protocol_class(self.header_timeout_s, self.max_connections),
            limit_concurrency=self.limit_concurrency,
            backlog=BACKLOG,  # asyncio listens again with it, over _bind's
        )
        self._server = uvicorn.Server(config)
        self._quiet = QuietWarnings()
        logging.getLogger("uvicorn.error").addFilter(self._quiet)
        self.ready.clear()
        self.error = None
        self._thread = threading.Thread(target=self._serve, name="hearth-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise ServerError(f"the API server did not start: {self.error or 'timed out'}")
        self.ready.set()
        logger.info("API server listening on %s", self.url)
        return self.port

    def _bind(self) -> socket.socket:
        from app.server.connections import BACKLOG

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP named, so asyncio turns Nagle off on each connection (it checks the protocol): with
        # Nagle, a response's second small write waits for the client's delayed ACK, 40 ms a request.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Not SO_REUSEPORT: a second Hearth must fail to bind, not share the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(BACKLOG)
        except OSError as exc:
            sock.close()
            raise ServerError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        sock.setblocking(False)
        return sock

    def _serve(self) -> None:
        try:
            asyncio.run(self._serve_logging_accept_errors_once())
        except BaseException as exc:  # reported through start() and the log, never lost
            self.error = exc
            logger.exception("the API server stopped with an error")

    async def _serve_logging_accept_errors_once(self) -> None:
        from app.server.connections import AcceptErrors

        asyncio.get_running_loop().set_exception_handler(AcceptErrors())
        await self._server.serve(sockets=[self._socket])

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop serving: cancel the jobs of open requests, close connections, free the port. True if the
        thread ended within `timeout`."""
        thread, server = self._thread, self._server
        if server is not None:
            cancelled = self.cancel_open() if self.cancel_open is not None else 0
            if cancelled:
                logger.info("stopping the API server: cancelled %d open requests", cancelled)
            server.should_exit = True
        ended = True
        if thread is not None:
            thread.join(max(0.0, timeout - GRACEFUL_S))
            if thread.is_alive() and server is not None:
                server.force_exit = True
                thread.join(GRACEFUL_S)
            ended = not thread.is_alive()
            if not ended:
                logger.error("the API server thread did not stop within %.1f s", timeout)
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._thread, self._server = None, None
        if self._quiet is not None:
            logging.getLogger("uvicorn.error").removeFilter(self._quiet)
            self._quiet = None
        self.ready.clear()
        return ended
