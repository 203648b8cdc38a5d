"""The user's MCP servers, connected through the official `mcp` SDK: started when first needed, with a start
timeout, restarted after a crash with growing pauses, each with a state the UI and CLI show (starting, ready
with N tools, failed: why).

The SDK is async: every connection lives on one event loop thread owned by `McpServers`, each held open by a
task of its own (a connection must be closed by the task that opened it). Callers on any thread get
`concurrent.futures.Future`s. A tool's result is text for the model, cut to MAX_RESULT_CHARS with a note
saying so: a tool cannot flood the context.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from app.core.errors import HearthError
from app.core.mcp.config import CONFIG_NAME, McpConfig, McpConfigError, ServerEntry, load_config
from app.core.mcp.secrets import SecretStore, with_secrets
from app.core.paths import open_private, private_dir

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 120.0
MAX_RESULT_CHARS = 32_000  # ~8k tokens: a page of output, not a dump
BACKOFF_S = (1.0, 2.0, 5.0, 15.0, 60.0)  # pauses before restarting a server that keeps failing
NOISE_LINES = 3  # a server's stdout lines that are not JSON-RPC: this many logged a minute, the rest counted
NOISE_WINDOW_S = 60.0

Status = Literal["stopped", "starting", "ready", "failed"]


class McpError(HearthError):
    """A server that cannot be reached or a call that did not complete; the message is for the user."""


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ServerState:
    name: str
    status: Status
    command: str  # what starts it (shown before its first start)
    tools: tuple[McpTool, ...] = ()
    error: str = ""

    @property
    def line(self) -> str:
        if self.status == "ready":
            return f"ready with {len(self.tools)} tool{'s' if len(self.tools) != 1 else ''}"
        return f"failed: {self.error}" if self.status == "failed" else self.status


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False
    truncated: bool = False


@dataclass
class _Connection:
    entry: ServerEntry
    state: ServerState
    client: Any = None
    holder: asyncio.Task | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    starting: asyncio.Future | None = None
    failures: int = 0
    retry_at: float = 0.0


# The server whose connection the running task serves: set by its holder task, inherited by the tasks the
# SDK's transport starts under it (the stdout reader among them), so a log record from there can name it.
_serving: contextvars.ContextVar[str] = contextvars.ContextVar("mcp_server", default="")


@dataclass
class _Noise:
    since: float
    logged: int = 0
    dropped: int = 0


class StdoutNoise(logging.Filter):
    """On the SDK's stdio transport logger, which logs a full traceback for every stdout line of a server that
    is not JSON-RPC (a banner, a stray print): one short warning a line instead, NOISE_LINES a minute per
    server at most, and a count of the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._noise: dict[str, _Noise] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to parse JSONRPC"):
            return True
        name = _serving.get() or "?"
        now = time.monotonic()
        with self._lock:
            noise = self._noise.setdefault(name, _Noise(now))
            dropped = 0
            if now - noise.since >= NOISE_WINDOW_S:  # a new minute: say how many the last one left out
                dropped, noise.since, noise.logged, noise.dropped = noise.dropped, now, 0, 0
            if noise.logged >= NOISE_LINES:
                noise.dropped += 1
                return False
            noise.logged += 1
        error = record.exc_info[1] if record.exc_info else None
        more = f" ({dropped} more such lines not logged)" if dropped else ""
        record.msg = "MCP server %s wrote a line that is not JSON-RPC on stdout (ignored): %s%s"
        record.args = (name, _bad_line(error), more)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True

    def flush(self, name: str) -> None:
        """A connection ended: the lines it left out, counted."""
        with self._lock:
            noise = self._noise.pop(name, None)
        if noise is not None and noise.dropped:
            logger.warning("MCP server %s wrote %d more lines that are not JSON-RPC on stdout", name, noise.dropped)


def _bad_line(error: BaseException | None) -> str:
    """The offending line, short: pydantic's error carries it as its input."""
    line: Any = None
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            line = errors()[0].get("input")
        except Exception:  # another error type's errors(): fall back to the message
            line = None
    if not isinstance(line, str):
        line = str(error).splitlines()[0] if error is not None else ""
    return repr(line[:120] + ("…" if len(line) > 120 else ""))


_NOISE = StdoutNoise()


def _quiet_stdout_noise() -> None:
    sdk = logging.getLogger("mcp.client.stdio")
    if _NOISE not in sdk.filters:
        sdk.addFilter(_NOISE)


def result_text(result: Any, limit: int = MAX_RESULT_CHARS) -> ToolResult:
    """A CallToolResult as text for the model: text parts as they are, other parts named, cut to `limit`."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4:,} bytes, not shown to the model]")
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}: binary, not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) <= limit:
        return ToolResult(text, bool(result.is_error))
    note = f"\n[output cut: the tool returned {len(text):,} characters; only the first {limit:,} are shown]"
    return ToolResult(text[:limit] + note, bool(result.is_error), truncated=True)


class McpServers:
    """The servers in `config_dir/mcp.json`. Any thread; `close()` stops them all."""

    def __init__(
        self,
        config_dir: Path,
        secrets: SecretStore | None = None,
        *,
        log_dir: Path | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> None:
        """`log_dir`: where each stdio server's stderr goes (`mcp-NAME.log`); None: discarded."""
        self.config_path = config_dir / CONFIG_NAME
        self.secrets = secrets or SecretStore.for_config(config_dir)
        self.log_dir = log_dir
        self.start_timeout_s, self.call_timeout_s, self.max_result_chars = (
            start_timeout_s,
            call_timeout_s,
            max_result_chars,
        )
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-servers", daemon=True)
        self._thread.start()
        self._connections: dict[str, _Connection] = {}
        self._logs: list[TextIO] = []
        _quiet_stdout_noise()
        self.config_error = ""  # why mcp.json could not be read at the last reload ('' when it could)
        try:
            self.reload()
        except McpConfigError as exc:  # a broken file: no servers until it is fixed (reload says why again)
            logger.warning("%s", exc)

    # -- the configuration ----------------------------------------------------------------------
    def reload(self) -> McpConfig:
        """Read mcp.json again: new servers are added (stopped), removed ones stopped and dropped. A file that
        cannot be read raises McpConfigError and changes nothing."""
        try:
            config = load_config(self.config_path)
        except McpConfigError as exc:
            self.config_error = str(exc)
            raise
        self.config_error = ""
        wanted = {n: e for n, e in config.servers.items() if not e.disabled}
        with self._lock:
            gone = [n for n in self._connections if n not in wanted or self._connections[n].entry != wanted[n]]
            for name in gone:
                self._run(self._stop(self._connections.pop(name)))
            for name, entry in wanted.items():
                if name not in self._connections:
                    self._connections[name] = _Connection(entry, ServerState(name, "stopped", entry.command_line()))
        return config

    def states(self) -> list[ServerState]:
        with self._lock:
            return [c.state for c in self._connections.values()]

    def state(self, name: str) -> ServerState:
        return self._connection(name).state

    def _connection(self, name: str) -> _Connection:
        with self._lock:
            conn = self._connections.get(name)
        if conn is None:
            known = ", ".join(self._connections) or "none yet: add one to " + str(self.config_path)
            raise McpError(f"no MCP server named {name!r} (servers: {known})")
        return conn

    # -- starting -------------------------------------------------------------------------------
    def start(self, name: str) -> Future:
        """Future[ServerState]: the server started (or already running), with its tools; McpError if it fails."""
        conn = self._connection(name)
        return self._run(self._ensure(name, conn))

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _ensure(self, name: str, conn: _Connection) -> ServerState:
        if conn.state.status == "ready" and conn.holder is not None and not conn.holder.done():
            return conn.state
        if conn.starting is None or conn.starting.done():
            wait = conn.retry_at - time.monotonic()
            if conn.state.status == "failed" and wait > 0:
                raise McpError(f"{name} failed ({conn.state.error}); trying again in {wait:.0f} s")
            conn.starting = asyncio.ensure_future(self._start(name, conn))
        return await asyncio.shield(conn.starting)

    async def _start(self, name: str, conn: _Connection) -> ServerState:
        conn.state = ServerState(name, "starting", conn.entry.command_line())
        conn.stop = asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        conn.holder = asyncio.ensure_future(self._hold(name, conn, ready))
        try:
            tools = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
        except TimeoutError:
            conn.holder.cancel()
            return self._failed(name, conn, f"it did not start within {self.start_timeout_s:g} s")
        except Exception as exc:
            return self._failed(name, conn, _reason(exc))
        conn.failures = 0
        conn.state = ServerState(name, "ready", conn.entry.command_line(), tools)
        logger.info("MCP server %s is ready with %d tools", name, len(tools))
        return conn.state

    def _failed(self, name: str, conn: _Connection, why: str) -> ServerState:
        conn.state = ServerState(name, "failed", conn.entry.command_line(), error=why)
        conn.retry_at = time.monotonic() + BACKOFF_S[min(conn.failures, len(BACKOFF_S) - 1)]
        conn.failures += 1
        logger.warning("MCP server %s failed: %s", name, why)
        raise McpError(f"{name} failed: {why}")

    async def _hold(self, name: str, conn: _Connection, ready: asyncio.Future) -> None:
        """The task that opens the connection, lists the tools, keeps it open until stopped, and closes it."""
        from mcp import Client

        _serving.set(name)  # this task's context: the transport's tasks started below inherit it
        try:
            # "auto": a server of any protocol era (the 2026 discovery, else the initialize handshake).
            async with Client(self._server(name, conn.entry), mode="auto") as client:
                conn.client = client
                listed = await client.list_tools()
                tools = tuple(
                    McpTool(name, t.name, t.description or "", dict(t.input_schema or {})) for t in listed.tools
                )
                ready.set_result(tools)
                await conn.stop.wait()
        except BaseException as exc:  # a server's crash, in any form, ends its connection here
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:  # cancelled: the start already gave up (its timeout) and says why
                    ready.cancel()
            elif conn.state.status == "ready" and not conn.stop.is_set():
                conn.state = ServerState(name, "failed", conn.entry.command_line(), error=_reason(exc))
                conn.retry_at = time.monotonic() + BACKOFF_S[0]
                logger.warning("MCP server %s stopped: %s", name, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            conn.client = None
            _NOISE.flush(name)

    def _server(self, name: str, entry: ServerEntry) -> Any:
        entry = with_secrets(name, entry, self.secrets)
        if entry.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(command=entry.command, args=entry.args, env=entry.env or None, cwd=entry.cwd)
            return stdio_client(params, errlog=self._errlog(name))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert entry.url is not None
        http = httpx2.AsyncClient(headers=entry.headers, timeout=httpx2.Timeout(30.0, read=self.call_timeout_s))
        return streamable_http_client(entry.url, http_client=http)

    def _errlog(self, name: str) -> TextIO:
        log: TextIO
        if self.log_dir is None:
            log = open(os.devnull, "w")  # noqa: SIM115 (kept open for the process's life)
        else:
            # The user's alone, as hearth.log: a server's stderr can carry paths, prompts and its own secrets.
            private_dir(self.log_dir)
            log = open_private(self.log_dir / f"mcp-{name}.log", "a")
        self._logs.append(log)
        return log

    # -- calling --------------------------------------------------------------------------------
    def call(self, name: str, tool: str, arguments: dict[str, Any], timeout_s: float | None = None) -> Future:
        """Future[ToolResult]: the tool's answer (its own errors have `is_error`); McpError when the server
        cannot be reached or does not answer in time. Cancelling the future cancels the call."""
        conn = self._connection(name)
        return self._run(self._call(name, conn, tool, arguments, timeout_s or self.call_timeout_s))

    async def _call(
        self, name: str, conn: _Connection, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        await self._ensure(name, conn)
        if tool not in {t.name for t in conn.state.tools}:
            raise McpError(f"{name} has no tool named {tool!r}")
        client = conn.client
        if client is None:
            raise McpError(f"{name} stopped before the call")
        try:
            result = await asyncio.wait_for(client.call_tool(tool, arguments), timeout_s)
        except TimeoutError as exc:
            raise McpError(f"{name}.{tool} did not answer within {timeout_s:g} s") from exc
        except asyncio.CancelledError:
            raise
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the server answered with an error (bad arguments, ...): still up
                raise McpError(f"{name}.{tool} refused the call: {exc.error.message}") from exc
            await self._lost(name, conn, exc)
            raise McpError(f"{name}.{tool} failed: {exc.error.message}") from exc
        except Exception as exc:
            await self._lost(name, conn, exc)
            raise McpError(f"{name}.{tool} failed: {_reason(exc)}") from exc
        return result_text(result, self.max_result_chars)

    async def _lost(self, name: str, conn: _Connection, exc: BaseException) -> None:
        """The connection is gone (a crashed process, a closed stream): the next call starts it again."""
        why = _reason(exc)
        await self._stop(conn)
        conn.state = ServerState(name, "failed", conn.entry.command_line(), error=why)
        conn.retry_at = time.monotonic() + BACKOFF_S[0]
        logger.warning("MCP server %s stopped during a call: %s", name, why)

    # -- stopping -------------------------------------------------------------------------------
    async def _stop(self, conn: _Connection) -> None:
        conn.stop.set()
        if conn.holder is not None:
            try:
                await asyncio.wait_for(asyncio.shield(conn.holder), 5.0)
            except (TimeoutError, Exception, asyncio.CancelledError):
                conn.holder.cancel()
        conn.state = ServerState(conn.state.name, "stopped", conn.entry.command_line())

    def close(self, timeout: float = 10.0) -> None:
        """Stop every server (their processes end), then the loop."""
        with self._lock:
            conns = list(self._connections.values())
        if conns:

            async def stop_all() -> None:
                await asyncio.gather(*(self._stop(c) for c in conns), return_exceptions=True)

            try:
                self._run(stop_all()).result(timeout)
            except Exception as exc:  # a server that will not stop must not keep Hearth from quitting
                logger.warning("MCP servers did not all stop: %s", exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        for log in self._logs:
            log.close()


def _reason(exc: BaseException) -> str:
    """An exception as a short reason (the SDK wraps a transport's failure in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
