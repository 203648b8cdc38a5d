"""The images attached to messages (schema step 2): written in the transaction that writes their message, read
by message id, counted without reading them."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from app.core.chat.db import ChatDB
from app.core.engines.base import ImageInput


class ImageRows:
    """The `message_images` table, over the database it is given (ChatStore holds one).

    Threads: `insert` and `copy` run inside a write transaction their caller holds (ChatStore's, on the chat
    writer thread) and use the connection it hands them. `counts` and `of` run on any thread (the UI thread,
    its pool) on the writer connection held alone, so a write never lands between their chunked reads.
    """

    def __init__(self, db: ChatDB) -> None:
        self._db = db

    def insert(self, c: sqlite3.Connection, msg_id: int, images: Sequence[ImageInput]) -> None:
        """`images`, in order, for message `msg_id`; `c` is the caller's open write transaction."""
        c.executemany(
            "INSERT INTO message_images(message_id, position, text_offset, sha256, data) VALUES (?, ?, ?, ?, ?)",
            [
                (msg_id, i, image.offset, hashlib.sha256(image.data).hexdigest(), image.data)
                for i, image in enumerate(images)
            ],
        )

    def copy(self, c: sqlite3.Connection, from_id: int, to_id: int, text_length: int) -> None:
        """Give message `to_id` the images of `from_id` (an edit keeps them), each placed no later than the end
        of its new text (`text_length`); `c` is the caller's open write transaction."""
        c.execute(
            "INSERT INTO message_images(message_id, position, text_offset, sha256, data)"
            " SELECT ?, position, min(text_offset, ?), sha256, data FROM message_images WHERE message_id = ?",
            (to_id, text_length, from_id),
        )

    def counts(self, msg_ids: Iterable[int]) -> dict[int, int]:
        """How many images each of these messages has (one without any is left out); no image is read."""
        out: dict[int, int] = {}
        with self._db.locked() as conn:
            for chunk, marks in id_chunks(msg_ids):
                where = f"FROM message_images WHERE message_id IN ({marks})"
                out.update(conn.execute(f"SELECT message_id, count(*) {where} GROUP BY message_id", chunk))
        return out

    def of(self, msg_ids: Iterable[int]) -> dict[int, list[ImageInput]]:
        """The images of these messages, by message id (a message without any is left out)."""
        out: dict[int, list[ImageInput]] = {}
        with self._db.locked() as conn:
            for chunk, marks in id_chunks(msg_ids):
                for mid, offset, data in conn.execute(
                    f"SELECT message_id, text_offset, data FROM message_images WHERE message_id IN ({marks})"
                    " ORDER BY message_id, position",
                    chunk,
                ):
                    out.setdefault(mid, []).append(ImageInput(data=bytes(data), offset=offset))
        return out


def id_chunks(ids: Iterable[int]) -> Iterator[tuple[list[int], str]]:
    """`ids` in slices within SQLite's bound on variables in one statement, each with its "?,?,…" list."""
    items = list(ids)
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        yield chunk, ",".join("?" * len(chunk))
