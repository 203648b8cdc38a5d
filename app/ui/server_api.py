"""The shape of the API service the Server page and the tray drive. `app.ui` must not import `app.server`:
the composition root passes the real `ApiService`, which fits these protocols structurally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from app.core.events import Event


class ServerStatusLike(Protocol):
    @property
    def running(self) -> bool: ...
    @property
    def url(self) -> str: ...  # the base URL clients use, ending in /v1; empty when stopped
    @property
    def error(self) -> str: ...  # why the last start failed
    @property
    def ollama_url(self) -> str: ...  # the extra listener on Ollama's port, when the setting is on and it runs
    @property
    def ollama_error(self) -> str: ...  # why that listener is not there while the server runs


class RequestStart(Protocol):
    """A request the server has just received and is still answering."""

    @property
    def id(self) -> int: ...  # the same as its RequestRecord's, once it is answered
    @property
    def at(self) -> float: ...  # time.time() when it arrived
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...


class RequestRecord(Protocol):
    """One finished request, as the server's request log keeps it."""

    @property
    def id(self) -> int: ...  # its RequestStart's (0: none was announced)
    @property
    def at(self) -> float: ...  # time.time() when it arrived
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def model(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def draft_tokens(self) -> int: ...
    @property
    def draft_accepted(self) -> int: ...


class RequestLogLike(Protocol):
    @property
    def added(self) -> Event[Any]: ...  # fires a RequestRecord on the server's thread
    @property
    def started(self) -> Event[Any]: ...  # fires a RequestStart on the server's thread

    def items(self) -> Sequence[RequestRecord]: ...


class ApiControl(Protocol):
    """start/stop/restart block for up to a few seconds: call them through TaskRunner, never on the UI thread."""

    @property
    def status(self) -> ServerStatusLike: ...
    @property
    def changed(self) -> Event[Any]: ...  # fires a ServerStatusLike on the thread that started or stopped it
    @property
    def log(self) -> RequestLogLike: ...

    def start(self) -> ServerStatusLike: ...
    def stop(self, timeout: float = ...) -> None: ...
    def restart(self) -> ServerStatusLike: ...
