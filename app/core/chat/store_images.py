"""The images attached to messages (schema step 2): written in the transaction that writes their message, read
by message id, counted without reading them."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from app.core.chat.db import ChatDB
from app.core.engines.base import ImageInput


class ImageRows(ChatDB):
    """ChatStore's part for images; `_insert_images` runs inside the caller's write transaction."""

    def _insert_images(self, c: sqlite3.Connection, msg_id: int, images: Sequence[ImageInput]) -> None:
        c.executemany(
            "INSERT INTO message_images(message_id, position, text_offset, sha256, data) VALUES (?, ?, ?, ?, ?)",
            [
                (msg_id, i, image.offset, hashlib.sha256(image.data).hexdigest(), image.data)
                for i, image in enumerate(images)
            ],
        )

    def image_counts(self, msg_ids: Iterable[int]) -> dict[int, int]:
        """How many images each of these messages has (one without any is left out); no image is read."""
        out: dict[int, int] = {}
        with self._lock:
            for chunk, marks in _id_chunks(msg_ids):
                where = f"FROM message_images WHERE message_id IN ({marks})"
                out.update(self._conn.execute(f"SELECT message_id, count(*) {where} GROUP BY message_id", chunk))
        return out

    def images_of(self, msg_ids: Iterable[int]) -> dict[int, list[ImageInput]]:
        """The images of these messages, by message id (a message without any is left out)."""
        out: dict[int, list[ImageInput]] = {}
        with self._lock:
            for chunk, marks in _id_chunks(msg_ids):
                for mid, offset, data in self._conn.execute(
                    f"SELECT message_id, text_offset, data FROM message_images WHERE message_id IN ({marks})"
                    " ORDER BY message_id, position",
                    chunk,
                ):
                    out.setdefault(mid, []).append(ImageInput(data=bytes(data), offset=offset))
        return out


def _id_chunks(ids: Iterable[int]) -> Iterator[tuple[list[int], str]]:
    """`ids` in slices within SQLite's bound on variables in one statement, each with its "?,?,…" list."""
    items = list(ids)
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        yield chunk, ",".join("?" * len(chunk))
