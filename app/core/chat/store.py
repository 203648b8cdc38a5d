"""Crash-safe chat history: conversations, messages (a tree: edits and regenerations make siblings,
the conversation shows one path) and presets, in one SQLite file.

ChatStore answers for the whole history; it owns the conversation and message rows itself and holds one
object for each other idea: the open database (ChatDB), the images of messages (ImageRows), the document
passages replies were given (SourceRows) and the presets (Presets). Each of those owns its own state; ChatStore
reaches them only through their methods.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.core.chat import rows
from app.core.chat.db import ChatDB, default_connect
from app.core.chat.grounding import Source
from app.core.chat.migrations import MIGRATIONS, Migration
from app.core.chat.models import (
    FINISHED_STATUSES,
    ChatNotFound,
    Conversation,
    Message,
    Preset,
)
from app.core.chat.presets import Presets
from app.core.chat.store_images import ImageRows
from app.core.chat.store_sources import SourceRows
from app.core.engines.base import GenerationStats, ImageInput, SamplingParams

logger = logging.getLogger(__name__)

DEFAULT_TITLE = "New chat"


class ChatStore:
    """The chat model layer the UI and the engine host use. Thread-safe (ChatDB's locks).

    `ChatStore(path)` opens (integrity check, migrations, crash recovery); see ChatDB. `db` is that open
    database, shared with the parts; a write through it belongs on the writer thread like any other.

    Threads: every write runs on the chat writer thread (ChatOperations submits it); reads run on any thread
    (the UI thread, its pool). `fts` is set once when it opens (tests may turn it off) and only read after.
    """

    def __init__(
        self,
        db_path: Path | str,
        *,
        migrations: Sequence[Migration] = MIGRATIONS,
        connect: Callable[[Path], sqlite3.Connection] = default_connect,
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.db = ChatDB(db_path, migrations=migrations, connect=connect, busy_timeout_ms=busy_timeout_ms)
        self.fts = self.db.has_fts  # whether search uses the index; the LIKE scan otherwise
        self._images = ImageRows(self.db)
        self._sources = SourceRows(self.db)
        self._presets = Presets(self.db)

    # --- the open file -----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def recovered_interrupted(self) -> int:
        """How many replies a crash had left `streaming` were marked interrupted when this store opened."""
        return self.db.recovered_interrupted

    def integrity_ok(self) -> bool:
        return self.db.integrity_ok()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ChatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- conversations ---------------------------------------------------------------------
    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        system_prompt: str = "",
        model_id: str | None = None,
        sampling: SamplingParams | None = None,
        context_length: int | None = None,
        preset_id: int | None = None,
    ) -> Conversation:
        now = time.time()
        sampling = sampling or SamplingParams()
        with self.db.write("the new conversation") as c:
            cid = rows.inserted_id(
                c.execute(
                    "INSERT INTO conversations(title, created_at, updated_at, system_prompt, model_id,"
                    " sampling_json, context_length, preset_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rows.clean_title(title),
                        now,
                        now,
                        system_prompt,
                        model_id,
                        sampling.model_dump_json(),
                        context_length,
                        preset_id,
                    ),
                )
            )
        return self.get_conversation(cid)

    def get_conversation(self, conv_id: int) -> Conversation:
        found = self.db.read("SELECT * FROM conversations WHERE id = ?", (conv_id,))
        if not found:
            raise ChatNotFound(f"No conversation {conv_id}.")
        return rows.conversation(found[0])

    def list_conversations(self, limit: int | None = None) -> list[Conversation]:
        """Most recently active first."""
        sql = "SELECT * FROM conversations ORDER BY updated_at DESC, id DESC"
        found = self.db.read(sql + " LIMIT ?", (limit,)) if limit else self.db.read(sql)
        return [rows.conversation(r) for r in found]

    def rename_conversation(self, conv_id: int, title: str) -> None:
        with self.db.write("the new title") as c:
            if not c.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (rows.clean_title(title), conv_id)
            ).rowcount:
                raise ChatNotFound(f"No conversation {conv_id}.")

    def delete_conversation(self, conv_id: int) -> None:
        with self.db.write("the deletion") as c:
            c.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

    def update_settings(
        self,
        conv_id: int,
        *,
        system_prompt: str = rows.UNSET,
        model_id: str | None = rows.UNSET,
        sampling: SamplingParams = rows.UNSET,
        context_length: int | None = rows.UNSET,
        preset_id: int | None = rows.UNSET,
    ) -> Conversation:
        """Change only the settings passed (None is a value: it clears model/context/preset)."""
        changes: dict[str, Any] = {}
        if system_prompt is not rows.UNSET:
            changes["system_prompt"] = system_prompt
        if model_id is not rows.UNSET:
            changes["model_id"] = model_id
        if sampling is not rows.UNSET:
            changes["sampling_json"] = SamplingParams.model_validate(sampling).model_dump_json()
        if context_length is not rows.UNSET:
            changes["context_length"] = context_length
        if preset_id is not rows.UNSET:
            changes["preset_id"] = preset_id
        if changes:
            sets = ", ".join(f"{k} = ?" for k in changes)
            with self.db.write("the conversation settings") as c:
                if not c.execute(
                    f"UPDATE conversations SET {sets} WHERE id = ?", (*changes.values(), conv_id)
                ).rowcount:
                    raise ChatNotFound(f"No conversation {conv_id}.")
        return self.get_conversation(conv_id)

    def apply_preset(self, conv_id: int, preset_id: int) -> Conversation:
        """Copy a preset's system prompt and sampling into the conversation and remember it."""
        p = self.get_preset(preset_id)
        return self.update_settings(conv_id, system_prompt=p.system_prompt, sampling=p.sampling, preset_id=p.id)

    def search(self, query: str, limit: int = 50) -> list[Conversation]:
        """Conversations whose title or any message text matches, most recent first."""
        q = query.strip()
        if not q:
            return self.list_conversations(limit)
        like = "%" + rows.escape_like(q) + "%"
        base = (
            "SELECT * FROM conversations WHERE title LIKE ? ESCAPE '\\' OR id IN ({inner})"
            " ORDER BY updated_at DESC, id DESC LIMIT ?"
        )
        like_inner = "SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\'"
        if self.fts and (expr := rows.fts_query(q)):
            fts_inner = (
                "SELECT conversation_id FROM messages WHERE id IN"
                " (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?)"
            )
            try:
                found = self.db.read(base.format(inner=fts_inner), (like, expr, limit))
                return [rows.conversation(r) for r in found]
            except sqlite3.OperationalError:
                logger.debug("FTS query %r failed; using LIKE", expr, exc_info=True)
        found = self.db.read(base.format(inner=like_inner), (like, like, limit))
        return [rows.conversation(r) for r in found]

    # --- messages --------------------------------------------------------------------------
    def get_message(self, msg_id: int) -> Message:
        found = self.db.read("SELECT * FROM messages WHERE id = ?", (msg_id,))
        if not found:
            raise ChatNotFound(f"No message {msg_id}.")
        return rows.message(found[0])

    def _insert_message(
        self,
        c: sqlite3.Connection,
        conv_id: int,
        parent_id: int | None,
        role: str,
        content: str,
        status: str,
    ) -> int:
        if parent_id is not None:
            owner = c.execute("SELECT conversation_id FROM messages WHERE id = ?", (parent_id,)).fetchone()
            if owner is None or owner[0] != conv_id:
                raise ChatNotFound(f"Message {parent_id} is not in conversation {conv_id}.")
        now = time.time()
        mid = rows.inserted_id(
            c.execute(
                "INSERT INTO messages(conversation_id, parent_id, role, content, status, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conv_id, parent_id, role, content, status, now, now),
            )
        )
        if not c.execute(
            "UPDATE conversations SET active_leaf_id = ?, updated_at = ? WHERE id = ?",
            (mid, now, conv_id),
        ).rowcount:
            raise ChatNotFound(f"No conversation {conv_id}.")
        return mid

    def _leaf(self, c: sqlite3.Connection, conv_id: int) -> int | None:
        row = c.execute("SELECT active_leaf_id FROM conversations WHERE id = ?", (conv_id,)).fetchone()
        if row is None:
            raise ChatNotFound(f"No conversation {conv_id}.")
        return row[0]

    def add_user_message(self, conv_id: int, text: str, images: Sequence[ImageInput] = ()) -> int:
        """Append to the shown branch and commit, with its images, in one transaction (before generation
        starts); returns its id."""
        with self.db.write("your message") as c:
            mid = self._insert_message(c, conv_id, self._leaf(c, conv_id), "user", text, "done")
            self._images.insert(c, mid, images)
            return mid

    def begin_assistant(self, conv_id: int, parent_id: int | None) -> int:
        """A `streaming` reply under `parent_id` (a sibling if it already has one: regenerate)."""
        with self.db.write("the reply") as c:
            return self._insert_message(c, conv_id, parent_id, "assistant", "", "streaming")

    def regenerate(self, assistant_id: int) -> int:
        """Start a new reply beside `assistant_id`; the old one stays as a branch."""
        old = self.get_message(assistant_id)
        return self.begin_assistant(old.conversation_id, old.parent_id)

    def update_streaming(self, msg_id: int, text: str) -> bool:
        """Save the partial reply (one UPDATE, its own transaction). False if it is no longer streaming."""
        changed = self.db.write_statement(
            "the reply",
            "UPDATE messages SET content = ?, updated_at = ? WHERE id = ? AND status = 'streaming'",
            (text, time.time(), msg_id),
        )
        return changed == 1

    def finish_assistant(
        self,
        msg_id: int,
        text: str,
        status: str = "done",
        stats: GenerationStats | dict[str, Any] | None = None,
        finish_reason: str | None = None,
        error: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """`tool_calls`: the calls the reply made ([{"id", "server", "tool", "arguments"}]), kept with it."""
        if status not in FINISHED_STATUSES:
            raise ValueError(f"finish status must be one of {FINISHED_STATUSES}, not {status!r}")
        stats_json = rows.dump_stats(stats)
        calls_json = json.dumps([dict(c) for c in tool_calls]) if tool_calls else None
        now = time.time()
        with self.db.write("the reply") as c:
            row = c.execute("SELECT conversation_id, role FROM messages WHERE id = ?", (msg_id,)).fetchone()
            if row is None or row[1] != "assistant":
                raise ChatNotFound(f"No assistant message {msg_id}.")
            c.execute(
                "UPDATE messages SET content = ?, status = ?, stats_json = ?, finish_reason = ?,"
                " error = ?, tool_calls_json = ?, updated_at = ? WHERE id = ?",
                (text, status, stats_json, finish_reason, error, calls_json, now, msg_id),
            )
            c.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, row[0]))

    def add_tool_result(
        self, conv_id: int, parent_id: int, call_id: str, content: str, error: str | None = None
    ) -> int:
        """A tool's result (or, with `error`, why there is none) under the assistant turn that called it,
        committed before the model reads it."""
        with self.db.write("the tool's result") as c:
            mid = self._insert_message(c, conv_id, parent_id, "tool", content, "error" if error else "done")
            c.execute("UPDATE messages SET tool_call_id = ?, error = ? WHERE id = ?", (call_id, error, mid))
            return mid

    def set_tool_servers(self, conv_id: int, servers: Sequence[str]) -> Conversation:
        """The MCP servers whose tools the model may call in this conversation."""
        with self.db.write("the conversation's tools") as c:
            if not c.execute(
                "UPDATE conversations SET tool_servers_json = ? WHERE id = ?",
                (json.dumps(list(servers)) if servers else None, conv_id),
            ).rowcount:
                raise ChatNotFound(f"No conversation {conv_id}.")
        return self.get_conversation(conv_id)

    def set_doc_collections(self, conv_id: int, names: Sequence[str]) -> Conversation:
        """The document collections searched for each message of this conversation."""
        with self.db.write("the conversation's documents") as c:
            if not c.execute(
                "UPDATE conversations SET doc_collections_json = ? WHERE id = ?",
                (json.dumps(list(names)) if names else None, conv_id),
            ).rowcount:
                raise ChatNotFound(f"No conversation {conv_id}.")
        return self.get_conversation(conv_id)

    def rename_doc_collection(self, old: str, new: str) -> list[int]:
        """Conversations that search collection `old` (names compare without case) search it as `new`; the
        ids of those changed."""
        changed = []
        with self.db.write("a collection's new name") as c:
            rows = c.execute(
                "SELECT id, doc_collections_json FROM conversations WHERE doc_collections_json IS NOT NULL"
            ).fetchall()
            for conv_id, raw in rows:
                names = json.loads(raw)
                if any(n.casefold() == old.casefold() for n in names):
                    names = [new if n.casefold() == old.casefold() else n for n in names]
                    c.execute(
                        "UPDATE conversations SET doc_collections_json = ? WHERE id = ?", (json.dumps(names), conv_id)
                    )
                    changed.append(conv_id)
        return changed

    def set_sources(self, msg_id: int, sources: Sequence[Source]) -> None:
        """The passages reply `msg_id` is given (their text kept), committed before it is generated."""
        with self.db.write("the reply's sources") as c:
            row = c.execute("SELECT role FROM messages WHERE id = ?", (msg_id,)).fetchone()
            if row is None or row[0] != "assistant":
                raise ChatNotFound(f"No assistant message {msg_id}.")
            self._sources.insert(c, msg_id, sources)

    def edit_user_message(self, msg_id: int, new_text: str) -> int:
        """Resend an edited user message as a sibling, with the old one's images; the old branch is kept,
        hidden."""
        old = self.get_message(msg_id)
        if old.role != "user":
            raise ValueError("only user messages can be edited and resent")
        with self.db.write("your edited message") as c:
            new_id = self._insert_message(c, old.conversation_id, old.parent_id, "user", new_text, "done")
            self._images.copy(c, msg_id, new_id, len(new_text))
            return new_id

    def delete_message(self, msg_id: int) -> None:
        """Remove one message; its replies move up to its parent, so the thread stays connected."""
        with self.db.write("the deletion") as c:
            row = c.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (msg_id,)).fetchone()
            if row is None:
                return
            conv_id, parent = row
            c.execute("UPDATE messages SET parent_id = ? WHERE parent_id = ?", (parent, msg_id))
            c.execute("DELETE FROM messages WHERE id = ?", (msg_id,))
            c.execute(
                "UPDATE conversations SET active_leaf_id = ? WHERE id = ? AND active_leaf_id = ?",
                (parent, conv_id, msg_id),
            )

    def branches(self, msg_id: int) -> list[Message]:
        """The message and its siblings (alternatives from edits/regenerations), oldest first."""
        m = self.get_message(msg_id)
        found = self.db.read(
            "SELECT * FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
            (m.conversation_id, m.parent_id),
        )
        return [rows.message(r) for r in found]

    def switch_branch(self, msg_id: int) -> None:
        """Show the branch through `msg_id`, down to its most recent descendant."""
        m = self.get_message(msg_id)
        with self.db.write("the branch choice") as c:
            leaf = msg_id
            while (
                child := c.execute(
                    "SELECT id FROM messages WHERE parent_id = ? ORDER BY id DESC LIMIT 1", (leaf,)
                ).fetchone()
            ) is not None:
                leaf = child[0]
            c.execute("UPDATE conversations SET active_leaf_id = ? WHERE id = ?", (leaf, m.conversation_id))

    def active_path(self, conv_id: int) -> list[Message]:
        """The shown thread, root first."""
        leaf = self.get_conversation(conv_id).active_leaf_id
        if leaf is None:
            return []
        return [rows.message(r) for r in self.db.read(rows.PATH_SQL, (leaf,))]

    def all_messages(self, conv_id: int) -> list[Message]:
        """Every message, hidden branches included, in creation order."""
        found = self.db.read("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conv_id,))
        return [rows.message(r) for r in found]

    # --- images (ImageRows) -------------------------------------------------------------------
    def image_counts(self, msg_ids: Iterable[int]) -> dict[int, int]:
        """How many images each of these messages has (one without any is left out); no image is read."""
        return self._images.counts(msg_ids)

    def images_of(self, msg_ids: Iterable[int]) -> dict[int, list[ImageInput]]:
        """The images of these messages, by message id (a message without any is left out)."""
        return self._images.of(msg_ids)

    # --- sources (SourceRows) -----------------------------------------------------------------
    def sources_of(self, msg_ids: Iterable[int]) -> dict[int, list[Source]]:
        """The passages these replies were given, by message id (one without any is left out)."""
        return self._sources.of(msg_ids)

    # --- presets (Presets) ---------------------------------------------------------------------
    def list_presets(self) -> list[Preset]:
        return self._presets.all()

    def get_preset(self, preset_id: int) -> Preset:
        return self._presets.get(preset_id)

    def save_preset(self, name: str, system_prompt: str = "", sampling: SamplingParams | None = None) -> Preset:
        return self._presets.save(name, system_prompt, sampling)

    def update_preset(
        self,
        preset_id: int,
        *,
        name: str = rows.UNSET,
        system_prompt: str = rows.UNSET,
        sampling: SamplingParams = rows.UNSET,
    ) -> Preset:
        """Change only the fields passed."""
        return self._presets.update(preset_id, name=name, system_prompt=system_prompt, sampling=sampling)

    def delete_preset(self, preset_id: int) -> None:
        """Conversations that used it keep their copied settings (preset_id becomes NULL)."""
        self._presets.delete(preset_id)

    # --- import --------------------------------------------------------------------------------
    def import_conversation(
        self,
        conv: Conversation,
        messages: Sequence[Message],
        active_leaf: int | None,
        images: Mapping[int, Sequence[ImageInput]] | None = None,
        sources: Mapping[int, Sequence[Source]] | None = None,
    ) -> int:
        """Insert a whole conversation in one transaction. Message ids/parents in `messages` are
        local (parents listed before children); `active_leaf`, `images`' and `sources`' keys are local ids.
        Returns the new id."""
        with self.db.write("the imported conversation") as c:
            cid = rows.inserted_id(
                c.execute(
                    "INSERT INTO conversations(title, created_at, updated_at, system_prompt, model_id,"
                    " sampling_json, context_length, tool_servers_json, doc_collections_json)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rows.clean_title(conv.title),
                        conv.created_at,
                        conv.updated_at,
                        conv.system_prompt,
                        conv.model_id,
                        conv.sampling.model_dump_json(),
                        conv.context_length,
                        json.dumps(list(conv.tool_servers)) if conv.tool_servers else None,
                        json.dumps(list(conv.doc_collections)) if conv.doc_collections else None,
                    ),
                )
            )
            ids: dict[int, int] = {}
            for m in messages:
                ids[m.id] = rows.inserted_id(
                    c.execute(
                        "INSERT INTO messages(conversation_id, parent_id, role, content, status,"
                        " created_at, updated_at, stats_json, finish_reason, error, tool_calls_json, tool_call_id)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            cid,
                            None if m.parent_id is None else ids[m.parent_id],
                            m.role,
                            m.content,
                            m.status,
                            m.created_at,
                            m.updated_at,
                            rows.dump_stats(m.stats),
                            m.finish_reason,
                            m.error,
                            json.dumps(m.tool_calls) if m.tool_calls else None,
                            m.tool_call_id,
                        ),
                    )
                )
                self._images.insert(c, ids[m.id], (images or {}).get(m.id, ()))
                if m.role == "assistant" and (given := (sources or {}).get(m.id)):
                    self._sources.insert(c, ids[m.id], given)
            leaf = ids.get(active_leaf) if active_leaf is not None else None
            c.execute("UPDATE conversations SET active_leaf_id = ? WHERE id = ?", (leaf, cid))
        return cid
