"""Stored Responses (`store: true`): what `previous_response_id` continues from, and what `GET` / `DELETE
/v1/responses/{id}` answer. Bounded by count and by size, the oldest evicted first. Kept in memory, and
on disk only when the user allows it (Settings → Server), since a conversation is the user's data.

Each entry holds the whole conversation the response ended (the messages it saw and what it said), so a
chain continues even after its older links were evicted.

On disk it is a journal: a version line, then one line per put or delete, appended (an agent stores a
response per turn: rewriting up to MAX_CHARS each time would not do), replayed on start with the same
bounds, and rewritten compactly once it has grown to several times what it holds. A torn last line (a
crash, a full disk) is skipped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text
from app.core.paths import open_private

logger = logging.getLogger(__name__)

MAX_RESPONSES = 256
MAX_CHARS = 32 * 1024 * 1024  # about the text of a few hundred long agent sessions
FILE_VERSION = 2  # 1: one JSON object with every item, rewritten on each change (still read)
# The journal is rewritten once it holds this many times the live items' characters (plus a floor).
COMPACT_FACTOR = 3
COMPACT_FLOOR = 1024 * 1024


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
        self._file_lock = threading.Lock()  # one writer at a time: an append must not race a rewrite
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
        with self._lock:
            self._insert(stored)
        self._log({"put": _item(stored)})

    def delete(self, response_id: str) -> bool:
        with self._lock:
            found = self._remove(response_id)
        if found:
            self._log({"delete": response_id})
        return found

    def _insert(self, stored: Stored) -> None:
        response_id = stored.response["id"]
        self._items.pop(response_id, None)
        self._items[response_id] = stored
        self._sizes[response_id] = stored.size()
        while len(self._items) > self.max_items or (
            len(self._items) > 1 and sum(self._sizes.values()) > self.max_chars
        ):
            old, _ = self._items.popitem(last=False)
            self._sizes.pop(old, None)
            logger.debug("evicted stored response %s", old)

    def _remove(self, response_id: str) -> bool:
        self._sizes.pop(response_id, None)
        return self._items.pop(response_id, None) is not None

    def _log(self, entry: dict[str, Any]) -> None:
        """Append one change to the journal (or rewrite it, when it has grown well past what it holds)."""
        if self.path is None:
            return
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        with self._file_lock:
            try:
                size = self.path.stat().st_size if self.path.exists() else 0
                with self._lock:
                    live = sum(self._sizes.values())
                if size == 0 or size > COMPACT_FACTOR * live + COMPACT_FLOOR:
                    self._write_all()
                else:
                    append_line(self.path, line)
            except OSError as exc:  # a full disk costs the saved copy, never the reply
                logger.warning("could not save stored responses to %s: %s", self.path, exc)

    def _save(self) -> None:
        if self.path is None:
            return
        with self._file_lock:
            try:
                self._write_all()
            except OSError as exc:
                logger.warning("could not save stored responses to %s: %s", self.path, exc)

    def _write_all(self) -> None:
        """Write the whole journal anew: the version line and one put per item held (file lock held)."""
        assert self.path is not None
        with self._lock:
            lines = [json.dumps({"version": FILE_VERSION})]
            lines += [json.dumps({"put": _item(s)}, ensure_ascii=False) for s in self._items.values()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, "\n".join(lines) + "\n")

    def _read(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable stored responses in %s: %s", path, exc)
            return
        head, _, rest = text.partition("\n")
        try:
            first = json.loads(head)
        except ValueError:
            first = None
        if isinstance(first, dict) and first.get("version") == 1:  # the old whole-file format
            for item in first.get("items") or []:
                self._take(item)
            self._save()  # now as a journal
            return
        if not (isinstance(first, dict) and first.get("version") == FILE_VERSION):
            logger.warning("ignoring stored responses in %s: not a file this version of Hearth wrote", path)
            return
        for line in rest.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                logger.warning("skipping a torn line in %s", path)
                continue
            if isinstance(entry, dict) and "put" in entry:
                self._take(entry["put"])
            elif isinstance(entry, dict) and isinstance(entry.get("delete"), str):
                self._remove(entry["delete"])

    def _take(self, item: Any) -> None:
        try:
            stored = Stored(item["response"], list(item["conversation"]), list(item.get("input_items", [])))
            str(stored.response["id"])
        except (KeyError, TypeError, AttributeError):
            return
        self._insert(stored)


def _item(stored: Stored) -> dict[str, Any]:
    return {"response": stored.response, "conversation": stored.conversation, "input_items": stored.input_items}


def append_line(path: Path, line: str) -> None:
    """Append and flush to disk: a stored response survives a crash right after its reply. The file is the
    user's alone (0600) from its first line: it holds their conversations."""
    with open_private(path, "a") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
