"""Child-process entry points for the crash tests (run as `python -m tests.core.chat.child ...`)."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

from app.core.chat.migrations import MIGRATIONS, Migration
from app.core.chat.store import ChatStore

SIGNAL_ENV = "HEARTH_TEST_MIGRATION_SIGNAL"
SLEEP_ENV = "HEARTH_TEST_MIGRATION_SLEEP"


def story(words: int) -> str:
    """The text the streaming child writes: its first `words` words."""
    return "".join(f"w{i} " for i in range(words))


def stream(db: str) -> None:
    store = ChatStore(db)
    conv = store.create_conversation("crash test")
    user = store.add_user_message(conv.id, "tell me a long story")
    reply = store.begin_assistant(conv.id, user)
    print(conv.id, user, reply, flush=True)
    text = ""
    for i in range(1_000_000):
        text += f"w{i} "
        store.update_streaming(reply, text)
        time.sleep(0.001)


def _next(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE TABLE tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn.execute("UPDATE conversations SET pinned = 1")
    if signal := os.environ.get(SIGNAL_ENV):
        Path(signal).write_text("mid-migration")
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    conn.execute("INSERT INTO tags(name) VALUES ('migrated')")


# The schema as shipped, and one more step after it that only the tests know.
CURRENT = MIGRATIONS[-1].version
NEXT = CURRENT + 1
MIGRATIONS_NEXT = [*MIGRATIONS, Migration(NEXT, "test: pinned column and tags table", _next)]


def migrate(db: str) -> None:
    ChatStore(db, migrations=MIGRATIONS_NEXT).close()
    print("migrated", flush=True)


if __name__ == "__main__":
    {"stream": stream, "migrate": migrate}[sys.argv[1]](sys.argv[2])
