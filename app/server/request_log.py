"""The last N requests, kept in memory for the Server page: time, method, path, model, tokens, duration,
status. Written by the server's thread, read by anyone; `started` (as a request arrives) and `added` (once
it is answered) fire on the server's thread."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass

from app.core.events import Event

DEFAULT_KEEP = 500


@dataclass(frozen=True)
class StartedRequest:
    """A request being answered: the page shows it at once (a long generation is not an empty log)."""

    id: int
    at: float  # time.time() when it arrived
    method: str
    path: str


@dataclass(frozen=True)
class LoggedRequest:
    at: float  # time.time() when it arrived
    method: str
    path: str
    status: int
    duration_s: float
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding's drafts, and how many were kept
    draft_accepted: int = 0
    id: int = 0  # its StartedRequest's id (0: none was announced)


class RequestLog:
    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._items: deque[LoggedRequest] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self.added: Event[LoggedRequest] = Event("server.request")
        self.started: Event[StartedRequest] = Event("server.request_started")
        self._ids = itertools.count(1)

    def start(self, method: str, path: str, at: float) -> StartedRequest:
        """Announce a request that has just arrived; its LoggedRequest later carries the same id."""
        started = StartedRequest(next(self._ids), at, method, path)
        self.started.emit(started)
        return started

    def add(self, item: LoggedRequest) -> None:
        with self._lock:
            self._items.append(item)
        self.added.emit(item)

    def items(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self._items)


class Timer:
    """Started when a request arrives; `done(...)` records it."""

    def __init__(self, log: RequestLog, method: str, path: str) -> None:
        self.log, self.method, self.path = log, method, path
        self.at, self._t0 = time.time(), time.perf_counter()
        self.id = log.start(method, path, self.at).id

    def done(self, status: int, model: str = "", usage: dict | None = None) -> None:
        u = usage or {}
        details = u.get("prompt_tokens_details") or {}
        predicted = u.get("completion_tokens_details") or {}
        accepted = int(predicted.get("accepted_prediction_tokens") or 0)
        rejected = int(predicted.get("rejected_prediction_tokens") or 0)
        self.log.add(
            LoggedRequest(
                self.at,
                self.method,
                self.path,
                status,
                time.perf_counter() - self._t0,
                model,
                int(u.get("prompt_tokens", 0)),
                int(u.get("completion_tokens", 0)),
                int(details.get("cached_tokens", 0)),
                accepted + rejected,
                accepted,
                self.id,
            )
        )
