"""The passages a reply was given from the user's documents (schema step 4): written before the reply is
generated, read back with the thread, so a reopened chat and an export show what the model read even after
the file changed or left its collection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from app.core.chat.db import ChatDB
from app.core.chat.grounding import Source
from app.core.chat.store_images import id_chunks


class SourceRows:
    """The `message_sources` table, over the database it is given (ChatStore holds one).

    Threads: `insert` runs inside a write transaction its caller holds (ChatStore's, on the chat writer thread).
    `of` runs on any thread (the UI thread, its pool) on the writer connection held alone.
    """

    def __init__(self, db: ChatDB) -> None:
        self._db = db

    def insert(self, c: sqlite3.Connection, msg_id: int, sources: Sequence[Source]) -> None:
        """`sources` for message `msg_id`, replacing any it had; `c` is the caller's open write transaction."""
        c.execute("DELETE FROM message_sources WHERE message_id = ?", (msg_id,))
        c.executemany(
            "INSERT INTO message_sources(message_id, number, collection, file, page, heading, text)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(msg_id, s.number, s.collection, str(s.file), s.page, s.heading, s.text) for s in sources],
        )

    def of(self, msg_ids: Iterable[int]) -> dict[int, list[Source]]:
        """The sources of these messages by message id, in their numbers' order (one without any is left out)."""
        out: dict[int, list[Source]] = {}
        with self._db.locked() as conn:
            for chunk, marks in id_chunks(msg_ids):
                for mid, number, collection, file, page, heading, text in conn.execute(
                    "SELECT message_id, number, collection, file, page, heading, text FROM message_sources"
                    f" WHERE message_id IN ({marks}) ORDER BY message_id, number",
                    chunk,
                ):
                    out.setdefault(mid, []).append(Source(number, collection, Path(file), page, heading, text))
        return out
