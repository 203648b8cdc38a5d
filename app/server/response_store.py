"""Stored Responses (`store: true`): what `previous_response_id` continues from, and what `GET` / `DELETE
/v1/responses/{id}` answer. Bounded by count and by size, the oldest evicted first. Kept in memory, and
on disk only when the user allows it (Settings → Server), since a conversation is the user's data.

Each entry holds the whole conversation the response ended (the messages it saw and what it said), so a
chain continues even after its older links were evicted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)

MAX_RESPONSES = 256
MAX_CHARS = 32 * 1024 * 1024  # about the text of a few hundred long agent sessions
FILE_VERSION = 1


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]  # the response object as the API returned it
    conversation: list[dict[str, Any]]  # ChatMessage dumps: the context it saw, then its own turn
    input_items: list[dict[str, Any]]  # its input, as items (GET /v1/responses/{id}/input_items)

    def size(self) -> int:
        return len(json.dumps(self.conversation)) + len(json.dumps(self.response))


class ResponseStore:
    """Thread-safe; `path` set: every change is also written there (call from a worker, not the loop)."""

    def __init__(self, path: Path | None = None, max_items: int = MAX_RESPONSES, max_chars: int = MAX_CHARS) -> None:
        self.path, self.max_items, self.max_chars = path, max_items, max_chars
        self._items: OrderedDict[str, Stored] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        if path is not None:
            self._read(path)

    def persist(self, path: Path | None) -> None:
        """Keep the store on disk at `path` from now on (written now), or no longer (None: the file the
        user no longer wants kept is removed; the responses stay in memory until the app quits)."""
        old, self.path = self.path, path
        if path is not None:
            self._save()
        elif old is not None:
            try:
                old.unlink(missing_ok=True)
            except OSError as exc:
                logger.warning("could not remove %s: %s", old, exc)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def get(self, response_id: str) -> Stored | None:
        with self._lock:
            return self._items.get(response_id)

    def put(self, stored: Stored) -> None:
        response_id = stored.response["id"]
        with self._lock:
            self._items.pop(response_id, None)
            self._items[response_id] = stored
            self._sizes[response_id] = stored.size()
            while len(self._items) > self.max_items or (
                len(self._items) > 1 and sum(self._sizes.values()) > self.max_chars
            ):
                old, _ = self._items.popitem(last=False)
                self._sizes.pop(old, None)
                logger.debug("evicted stored response %s", old)
        self._save()

    def delete(self, response_id: str) -> bool:
        with self._lock:
            found = self._items.pop(response_id, None) is not None
            self._sizes.pop(response_id, None)
        if found:
            self._save()
        return found

    def _save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            items = [
                {"response": s.response, "conversation": s.conversation, "input_items": s.input_items}
                for s in self._items.values()
            ]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"version": FILE_VERSION, "items": items}, ensure_ascii=False))
        except OSError as exc:  # a full disk costs the saved copy, never the reply
            logger.warning("could not save stored responses to %s: %s", self.path, exc)

    def _read(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable stored responses in %s: %s", path, exc)
            return
        items = data.get("items") if isinstance(data, dict) and data.get("version") == FILE_VERSION else None
        for item in items or []:
            try:
                stored = Stored(item["response"], list(item["conversation"]), list(item.get("input_items", [])))
                response_id = str(stored.response["id"])
            except (KeyError, TypeError):
                continue
            self._items[response_id] = stored
            self._sizes[response_id] = stored.size()
