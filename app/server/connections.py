"""Slow and exhausting clients at the connection level (security.md T41): a deadline for a request's
headers, a cap on open connections, and accept() errors and uvicorn's per-request warnings logged once a minute.

uvicorn 0.55's h11 protocol times out only an idle keep-alive connection after a response; a connection
that never sends a request, or sends its headers a byte at a time, stays open for good (and keeps a file
descriptor). The request body's deadline is the front door's (security.py, body.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

# A client on this machine or the LAN sends its headers (a few hundred bytes, 64 KiB at most) in one write;
# 10 s is generous for that and short enough that a slowloris client frees its descriptor quickly.
HEADER_TIMEOUT_S = 10.0
# Requests served at once (uvicorn answers 503 past it, counting open connections too): four times the 64
# concurrent streams the server must carry, so streams and their clients' idle keep-alive sockets fit.
LIMIT_CONCURRENCY = 256
# Connections held open at most (past it a new one is closed at once): twice the concurrency limit, so
# requests past that limit still get uvicorn's 503, but never more than half the process's descriptors,
# which the GUI, SQLite, model files and downloads share (macOS gives a GUI app 256).
MAX_CONNECTIONS = 2 * LIMIT_CONCURRENCY
# The listen queue: connections the kernel holds until accept(); more wait in SYN retries, costing nothing.
BACKLOG = 128
ACCEPT_ERROR = "socket.accept() out of system resource"  # asyncio's message (selector_events.py)
REPORT_EVERY_S = 60.0


def fd_limit() -> int | None:
    """The process's soft limit on open descriptors (None where there is none to read: Windows)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def default_max_connections() -> int:
    limit = fd_limit()
    return MAX_CONNECTIONS if limit is None else max(16, min(MAX_CONNECTIONS, limit // 2))


class Throttled:
    """A warning that an attacker can trigger once per connection, logged at most once per `every_s` with
    the number of times it was held back."""

    def __init__(self, every_s: float = REPORT_EVERY_S) -> None:
        self.every_s = every_s
        self._last = -float("inf")
        self._held = 0

    def log(self, level: int, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._held += 1
            return
        held, self._held, self._last = self._held, 0, now
        suffix = f" ({held} more since the last report)" if held else ""
        logger.log(level, message + suffix, *args)


class AcceptErrors:
    """The server loop's exception handler: asyncio logs every failed accept() with a traceback, and on
    EMFILE it does so once per queued connection each event-loop tick (it removes the reader but keeps
    looping), megabytes a second. One line a minute instead; asyncio itself retries accepting after 1 s,
    and the header deadline frees the descriptors slow clients hold. Anything else goes to asyncio."""

    def __init__(self, every_s: float = REPORT_EVERY_S) -> None:
        self.report = Throttled(every_s)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        self.report.log(logging.ERROR, "the API server cannot accept connections: %s", context.get("exception"))


class QuietWarnings(logging.Filter):
    """On uvicorn's error logger while a server runs. Its warnings are per request, and any client can
    trigger them ("Invalid HTTP request received.", an upgrade it cannot do, "Exceeded concurrency
    limit."): each once a minute with the count held back, so a client sending garbage in a loop cannot
    fill stderr and the log. Errors (a route's traceback) are left alone."""

    def __init__(self, every_s: float = REPORT_EVERY_S) -> None:
        super().__init__()
        self.every_s = every_s
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not isinstance(record.msg, str):
            return True
        now = time.monotonic()
        last, held = self._seen.get(record.msg, (-float("inf"), 0))
        if now - last < self.every_s:
            self._seen[record.msg] = (last, held + 1)
            return False
        self._seen[record.msg] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more since the last report)"
        return True


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers, armed when the connection opens
    and again when a response completes (covering the next request on a kept-alive connection, and a body
    still trickling in after its response), cleared when h11 has parsed a request's headers. The deadline
    closes the connection; a request already being served is never cut. Subclassed per server by
    `protocol_class`, so the limits are class attributes (uvicorn builds protocols with fixed arguments)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    too_many: Throttled = Throttled()
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self.too_many.log(logging.WARNING, "closed a connection: %d are open already", self.max_connections)
            transport.close()
            return
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_header_deadline()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # h11 parsed a request's headers: the route and the front door take over
            self._clear_header_deadline()

    def on_response_complete(self) -> None:
        # Armed before uvicorn looks at pipelined data, which may hold the next request's headers already.
        if not self.transport.is_closing():
            self._arm_header_deadline()
        super().on_response_complete()

    def _arm_header_deadline(self) -> None:
        self._clear_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _clear_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            logger.debug("closed a connection that sent no complete request within %.0f s", self.header_timeout_s)
            self.transport.close()


def protocol_class(header_timeout_s: float, max_connections: int) -> type[GuardedH11Protocol]:
    """A GuardedH11Protocol with these limits, for uvicorn.Config(http=…)."""
    attrs = {"header_timeout_s": header_timeout_s, "max_connections": max_connections, "too_many": Throttled()}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)
