"""Row ↔ record conversion and small SQL helpers for the chat store."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

from app.core.chat.models import Conversation, Message, Preset, stats_to_dict
from app.core.engines.base import GenerationStats, SamplingParams

logger = logging.getLogger(__name__)

MAX_TITLE = 200

# The default of an update's keyword that was not passed: None is a value there (it clears a setting).
# One object for the whole package, so ChatStore can hand its callers' keywords on to Presets unchanged.
UNSET: Any = object()

# Walk parent links from the leaf up to the root; ordered root first.
PATH_SQL = """
WITH RECURSIVE path(id, parent_id, depth) AS (
    SELECT id, parent_id, 0 FROM messages WHERE id = ?
    UNION ALL
    SELECT m.id, m.parent_id, path.depth + 1 FROM messages m JOIN path ON m.id = path.parent_id
)
SELECT messages.* FROM path JOIN messages ON messages.id = path.id ORDER BY path.depth DESC
"""


def inserted_id(cursor: sqlite3.Cursor) -> int:
    """The rowid an INSERT just made (sqlite3 types it Optional: it is None only before any insert)."""
    if cursor.lastrowid is None:
        raise sqlite3.OperationalError("the insert made no row")
    return cursor.lastrowid


def sampling(text: str | None) -> SamplingParams:
    try:
        return SamplingParams.model_validate_json(text or "{}")
    except ValueError:
        # Written by another version or edited by hand: defaults beat refusing to open the chat.
        logger.warning("unreadable sampling settings %r; using defaults", text)
        return SamplingParams()


def conversation(r: sqlite3.Row) -> Conversation:
    return Conversation(
        id=r["id"],
        title=r["title"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        system_prompt=r["system_prompt"],
        model_id=r["model_id"],
        sampling=sampling(r["sampling_json"]),
        context_length=r["context_length"],
        preset_id=r["preset_id"],
        active_leaf_id=r["active_leaf_id"],
        tool_servers=tuple(_json_list(r["tool_servers_json"])),
        doc_collections=tuple(str(n) for n in _json_list(r["doc_collections_json"])),
    )


def message(r: sqlite3.Row) -> Message:
    stats = json.loads(r["stats_json"]) if r["stats_json"] else None
    return Message(
        id=r["id"],
        conversation_id=r["conversation_id"],
        parent_id=r["parent_id"],
        role=r["role"],
        content=r["content"],
        status=r["status"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        stats=stats,
        finish_reason=r["finish_reason"],
        error=r["error"],
        tool_calls=_json_list(r["tool_calls_json"]) or None,
        tool_call_id=r["tool_call_id"],
    )


def _json_list(text: str | None) -> list[Any]:
    """A stored JSON list; [] for none or one that cannot be read (logged: the rest of the row still shows)."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        logger.warning("unreadable stored list %r; left out", text[:80])
        return []
    return value if isinstance(value, list) else []


def preset(r: sqlite3.Row) -> Preset:
    return Preset(
        id=r["id"],
        name=r["name"],
        system_prompt=r["system_prompt"],
        sampling=sampling(r["sampling_json"]),
        builtin=bool(r["builtin"]),
    )


def dump_stats(stats: GenerationStats | dict[str, Any] | None) -> str | None:
    d = stats_to_dict(stats)
    return None if d is None else json.dumps(d)


def clean_title(title: str) -> str:
    title = " ".join(str(title).split())[:MAX_TITLE]
    return title or "New chat"


FIRST_MESSAGE_TITLE = 60  # characters of the first message a new chat is named by


def title_from_message(text: str, images: int = 0) -> str:
    """The title a chat gets from its first message: its first words ("Image" for a picture sent without
    any). Editing that message names the chat again, unless the user renamed it (its title is no longer this)."""
    return " ".join(text.split())[:FIRST_MESSAGE_TITLE] or ("Image" if images else "")


def clean_preset_name(name: str) -> str:
    name = " ".join(str(name).split())[:MAX_TITLE]
    if not name:
        raise ValueError("a preset needs a name")
    return name


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def fts_query(text: str) -> str:
    """Each word as a quoted prefix term (all must match), so user input is never FTS syntax."""
    terms = ['"' + w.replace('"', '""') + '"*' for w in text.split() if any(ch.isalnum() for ch in w)]
    return " ".join(terms)


def has_fts(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
    return row is not None
