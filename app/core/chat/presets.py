"""Presets: a name, a system prompt and sampling parameters; built-ins are seeded by migration v1."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from app.core.chat import rows
from app.core.chat.db import ChatDB
from app.core.chat.models import ChatNotFound, ChatStoreError, Preset
from app.core.engines.base import SamplingParams

_UNSET: Any = object()


class PresetStore(ChatDB):
    def list_presets(self) -> list[Preset]:
        found = self._read("SELECT * FROM presets ORDER BY builtin DESC, id")
        return [rows.preset(r) for r in found]

    def get_preset(self, preset_id: int) -> Preset:
        found = self._read("SELECT * FROM presets WHERE id = ?", (preset_id,))
        if not found:
            raise ChatNotFound(f"No preset {preset_id}.")
        return rows.preset(found[0])

    def save_preset(self, name: str, system_prompt: str = "", sampling: SamplingParams | None = None) -> Preset:
        name = rows.clean_preset_name(name)
        sampling = sampling or SamplingParams()
        try:
            with self._write("the preset") as c:
                pid = rows.inserted_id(
                    c.execute(
                        "INSERT INTO presets(name, system_prompt, sampling_json, builtin, created_at)"
                        " VALUES (?, ?, ?, 0, ?)",
                        (name, system_prompt, sampling.model_dump_json(), time.time()),
                    )
                )
        except sqlite3.IntegrityError as e:
            raise ChatStoreError(f"A preset named “{name}” already exists.") from e
        return self.get_preset(pid)

    def update_preset(
        self,
        preset_id: int,
        *,
        name: str = _UNSET,
        system_prompt: str = _UNSET,
        sampling: SamplingParams = _UNSET,
    ) -> Preset:
        changes: dict[str, Any] = {}
        if name is not _UNSET:
            changes["name"] = rows.clean_preset_name(name)
        if system_prompt is not _UNSET:
            changes["system_prompt"] = system_prompt
        if sampling is not _UNSET:
            changes["sampling_json"] = SamplingParams.model_validate(sampling).model_dump_json()
        if changes:
            sets = ", ".join(f"{k} = ?" for k in changes)
            try:
                with self._write("the preset") as c:
                    if not c.execute(
                        f"UPDATE presets SET {sets} WHERE id = ?", (*changes.values(), preset_id)
                    ).rowcount:
                        raise ChatNotFound(f"No preset {preset_id}.")
            except sqlite3.IntegrityError as e:
                raise ChatStoreError(f"A preset named “{changes.get('name')}” already exists.") from e
        return self.get_preset(preset_id)

    def delete_preset(self, preset_id: int) -> None:
        """Conversations that used it keep their copied settings (preset_id becomes NULL)."""
        with self._write("the preset deletion") as c:
            c.execute("DELETE FROM presets WHERE id = ?", (preset_id,))
