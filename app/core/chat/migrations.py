"""Schema migrations for the chat database: versioned by `PRAGMA user_version`, each run in one
transaction after a backup, so a kill leaves the old schema or the new one, plus the backup."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.core.chat.models import ChatStoreError
from app.core.engines.base import SamplingParams
from app.core.paths import private_database

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    version: int  # the schema version after this step
    name: str
    apply: Callable[[sqlite3.Connection], None]  # runs inside the migration's transaction


_V1_SCHEMA = [
    """CREATE TABLE presets (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        system_prompt TEXT NOT NULL DEFAULT '',
        sampling_json TEXT NOT NULL,
        builtin INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        model_id TEXT,
        sampling_json TEXT NOT NULL,
        context_length INTEGER,
        preset_id INTEGER REFERENCES presets(id) ON DELETE SET NULL,
        active_leaf_id INTEGER
    )""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        content TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL
            CHECK (status IN ('done', 'streaming', 'stopped', 'error', 'interrupted')),
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        stats_json TEXT,
        finish_reason TEXT,
        error TEXT
    )""",
    "CREATE INDEX messages_conversation ON messages(conversation_id)",
    "CREATE INDEX messages_parent ON messages(parent_id)",
    "CREATE INDEX messages_status ON messages(status)",
    "CREATE INDEX conversations_updated ON conversations(updated_at)",
]

# Only finished text is indexed: streaming updates (every second) then never touch the index.
_V1_FTS = [
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id')",
    """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages WHEN new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    """CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages WHEN old.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    # One trigger, so the old entry is deleted before the new one is added (SQLite runs several
    # triggers on one event newest first); parent_id changes don't touch the index at all.
    """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, status ON messages
        WHEN old.status != 'streaming' OR new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            SELECT 'delete', old.id, old.content WHERE old.status != 'streaming';
        INSERT INTO messages_fts(rowid, content)
            SELECT new.id, new.content WHERE new.status != 'streaming';
    END""",
]

BUILTIN_PRESETS: list[tuple[str, str, SamplingParams]] = [
    ("Default", "", SamplingParams()),
    ("Precise", "", SamplingParams(temperature=0.2)),
    ("Creative", "", SamplingParams(temperature=1.0)),
]


def fts5_available(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._hearth_fts_probe USING fts5(x)")
        conn.execute("DROP TABLE temp._hearth_fts_probe")
        return True
    except sqlite3.OperationalError:
        return False


def _v1(conn: sqlite3.Connection) -> None:
    for sql in _V1_SCHEMA:
        conn.execute(sql)
    if fts5_available(conn):
        for sql in _V1_FTS:
            conn.execute(sql)
    else:
        logger.info("SQLite has no FTS5; chat search falls back to LIKE")
    now = time.time()
    for name, prompt, sampling in BUILTIN_PRESETS:
        conn.execute(
            "INSERT INTO presets(name, system_prompt, sampling_json, builtin, created_at) VALUES (?, ?, ?, 1, ?)",
            (name, prompt, sampling.model_dump_json(), now),
        )


def _v2(conn: sqlite3.Connection) -> None:
    # Images a user attached, kept with their message (a backup or export of the database holds them): the
    # file's bytes as sent, where in the text each sits, and its hash, so the same picture is recognised.
    conn.execute(
        """CREATE TABLE message_images (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            text_offset INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (message_id, position)
        )"""
    )


def _v3(conn: sqlite3.Connection) -> None:
    # MCP tools in the chat: the calls an assistant turn made (JSON: id, server, tool, arguments), the call a
    # tool turn answers, and the servers whose tools a conversation has on.
    conn.execute("ALTER TABLE messages ADD COLUMN tool_calls_json TEXT")
    conn.execute("ALTER TABLE messages ADD COLUMN tool_call_id TEXT")
    conn.execute("ALTER TABLE conversations ADD COLUMN tool_servers_json TEXT")


def _v4(conn: sqlite3.Connection) -> None:
    # Documents in the chat: the collections a conversation searches, and the passages each reply was given,
    # kept with it (their text, not a pointer into the documents database), so a reopened chat or an export
    # shows what the model read even after the file changed or its collection was deleted.
    conn.execute("ALTER TABLE conversations ADD COLUMN doc_collections_json TEXT")
    conn.execute(
        """CREATE TABLE message_sources (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            number INTEGER NOT NULL,
            collection TEXT NOT NULL DEFAULT '',
            file TEXT NOT NULL,
            page INTEGER,
            heading TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            PRIMARY KEY (message_id, number)
        )"""
    )


MIGRATIONS: list[Migration] = [
    Migration(1, "initial schema, search index, built-in presets", _v1),
    Migration(2, "images attached to messages", _v2),
    Migration(3, "tool calls and results, the tools a conversation uses", _v3),
    Migration(4, "document collections a conversation uses, the passages a reply was given", _v4),
]


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def backup_path(db_path: Path, version: int) -> Path:
    return db_path.with_name(f"{db_path.name}.bak-v{version}")


def latest_backup(db_path: Path) -> Path | None:
    backups = [p for p in db_path.parent.glob(f"{db_path.name}.bak-v*") if not p.name.endswith(".tmp")]
    return max(backups, key=lambda p: p.stat().st_mtime, default=None)


def backup(conn: sqlite3.Connection, dest: Path) -> None:
    """Copy the live database with the sqlite3 backup API; written to a temp file, then renamed."""
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    private_database(tmp)  # a copy of the chat history, as private as the history
    target = sqlite3.connect(tmp)
    try:
        conn.backup(target)
    finally:
        target.close()
    with open(tmp, "r+b") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest)


def migrate(conn: sqlite3.Connection, db_path: Path, migrations: Sequence[Migration]) -> int:
    """Bring the schema up to the last migration; returns the version reached.

    All pending steps run in one `BEGIN IMMEDIATE` transaction, so the schema is old or new, never
    half. A database that already has a schema is backed up to `<db>.bak-v<N>` first.
    """
    target = max((m.version for m in migrations), default=0)
    current = schema_version(conn)
    if current > target:
        raise ChatStoreError(
            f"The chat history {db_path} was written by a newer Hearth (schema v{current}; this"
            f" version knows v{target}). Update Hearth to open it."
        )
    pending = sorted((m for m in migrations if m.version > current), key=lambda m: m.version)
    if not pending:
        return current
    if current > 0:
        dest = backup_path(db_path, current)
        backup(conn, dest)
        logger.info("backed up chat database v%d to %s before migrating", current, dest)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for step in pending:
            logger.info("migrating chat database to v%d: %s", step.version, step.name)
            step.apply(conn)
            conn.execute(f"PRAGMA user_version = {int(step.version)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return target
