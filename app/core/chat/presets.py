"""Presets: a name, a system prompt and sampling parameters; built-ins are seeded by migration v1."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from app.core.chat import rows
from app.core.chat.db import ChatDB
from app.core.chat.models import ChatNotFound, ChatStoreError, Preset
from app.core.engines.base import SamplingParams


class Presets:
    """The `presets` table, over the database it is given (ChatStore holds one and answers for it).

    Threads: `save`, `update` and `delete` run on the chat writer thread (ChatOperations submits them);
    `all` and `get` run on any thread (the UI thread lists them) through the database's read connection.
    """

    def __init__(self, db: ChatDB) -> None:
        self._db = db

    def all(self) -> list[Preset]:
        """Built-ins first, then the user's, oldest first."""
        found = self._db.read("SELECT * FROM presets ORDER BY builtin DESC, id")
        return [rows.preset(r) for r in found]

    def get(self, preset_id: int) -> Preset:
        found = self._db.read("SELECT * FROM presets WHERE id = ?", (preset_id,))
        if not found:
            raise ChatNotFound(f"No preset {preset_id}.")
        return rows.preset(found[0])

    def save(self, name: str, system_prompt: str = "", sampling: SamplingParams | None = None) -> Preset:
        name = rows.clean_preset_name(name)
        sampling = sampling or SamplingParams()
        try:
            with self._db.write("the preset") as c:
                pid = rows.inserted_id(
                    c.execute(
                        "INSERT INTO presets(name, system_prompt, sampling_json, builtin, created_at)"
                        " VALUES (?, ?, ?, 0, ?)",
                        (name, system_prompt, sampling.model_dump_json(), time.time()),
                    )
                )
        except sqlite3.IntegrityError as e:
            raise ChatStoreError(f"A preset named “{name}” already exists.") from e
        return self.get(pid)

    def update(
        self,
        preset_id: int,
        *,
        name: str = rows.UNSET,
        system_prompt: str = rows.UNSET,
        sampling: SamplingParams = rows.UNSET,
    ) -> Preset:
        """Change only the fields passed."""
        changes: dict[str, Any] = {}
        if name is not rows.UNSET:
            changes["name"] = rows.clean_preset_name(name)
        if system_prompt is not rows.UNSET:
            changes["system_prompt"] = system_prompt
        if sampling is not rows.UNSET:
            changes["sampling_json"] = SamplingParams.model_validate(sampling).model_dump_json()
        if changes:
            sets = ", ".join(f"{k} = ?" for k in changes)
            try:
                with self._db.write("the preset") as c:
                    if not c.execute(
                        f"UPDATE presets SET {sets} WHERE id = ?", (*changes.values(), preset_id)
                    ).rowcount:
                        raise ChatNotFound(f"No preset {preset_id}.")
            except sqlite3.IntegrityError as e:
                raise ChatStoreError(f"A preset named “{changes.get('name')}” already exists.") from e
        return self.get(preset_id)

    def delete(self, preset_id: int) -> None:
        """Conversations that used it keep their copied settings (preset_id becomes NULL)."""
        with self._db.write("the preset deletion") as c:
            c.execute("DELETE FROM presets WHERE id = ?", (preset_id,))
