"""Errors of a remote server, as engine errors: the host and the API already know how to report those."""

from __future__ import annotations

from typing import Any

from app.core.engines.errors import EngineError


class RemoteError(EngineError):
    """A remote server failed a request; the message names the remote and says what happened.
    `code` may be set per instance to the failure kind the API should answer with."""

    def __init__(self, message: str, code: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        if code is not None:
            self.code = code


class RemoteUnreachable(RemoteError):
    """Nothing answered at the remote's address (refused, no route, DNS, connect timeout)."""

    code = "unavailable"


class RemoteRefused(RemoteError):
    """The remote answered 401/403: the API key is missing or wrong."""
