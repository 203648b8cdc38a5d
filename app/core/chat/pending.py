"""What the chat writes in flight will change, so reads made meanwhile already show it.

A rename or a settings save is committed a few milliseconds after the UI asks for it (an fsync on the
writer thread); a read in between (the list, the open conversation, the next send's settings) must not
show the old state. Each pending change is recorded when the write is submitted and settled when it
is done, committed or not: after a failure, reads show the stored state again.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.core.chat.models import Conversation

# The conversation fields a pending write may change (the store's keyword names are the same).
FIELDS = frozenset({"title", "system_prompt", "model_id", "sampling", "context_length", "preset_id"})


class PendingWrites:
    """Thread-safe: changes are recorded on the submitting thread and settled on the writer thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._fields: dict[int, dict[str, tuple[int, Any]]] = {}  # conv id -> field -> (seq, value)
        self._deleting: Counter[int] = Counter()

    def change(self, conv_id: int, **fields: Any) -> Callable[[], None]:
        """Record new values for a conversation's fields; returns the function that settles them."""
        unknown = set(fields) - FIELDS
        if unknown:
            raise ValueError(f"not conversation fields: {sorted(unknown)}")
        with self._lock:
            self._seq += 1
            seq = self._seq
            mine = self._fields.setdefault(conv_id, {})
            for name, value in fields.items():
                mine[name] = (seq, value)

        def settle() -> None:
            with self._lock:
                mine = self._fields.get(conv_id, {})
                for name in fields:
                    if name in mine and mine[name][0] == seq:  # a later change of the field stays
                        del mine[name]
                if not mine:
                    self._fields.pop(conv_id, None)

        return settle

    def delete(self, conv_id: int) -> Callable[[], None]:
        """Hide a conversation until its deletion is settled."""
        with self._lock:
            self._deleting[conv_id] += 1

        def settle() -> None:
            with self._lock:
                self._deleting[conv_id] -= 1
                if self._deleting[conv_id] <= 0:
                    del self._deleting[conv_id]

        return settle

    def snapshot(self) -> PendingView:
        """The changes in flight now. Taken before a read of the store: a write settled after it is already
        committed, so the read sees it either way (settled before the store read and the snapshot would miss it)."""
        with self._lock:
            fields = {cid: {name: value for name, (_seq, value) in mine.items()} for cid, mine in self._fields.items()}
            return PendingView(fields, frozenset(self._deleting))


class PendingView:
    """A frozen copy of the writes in flight at one moment (any thread)."""

    def __init__(self, fields: dict[int, dict[str, Any]], deleting: frozenset[int]) -> None:
        self._fields = fields
        self._deleting = deleting

    def hidden(self, conv_id: int) -> bool:
        return conv_id in self._deleting

    def apply(self, conv: Conversation) -> Conversation:
        """`conv` as it will be once the writes in flight are committed."""
        changes = self._fields.get(conv.id)
        return replace(conv, **changes) if changes else conv

    def visible(self, convs: list[Conversation]) -> list[Conversation]:
        """The conversations not being deleted, with their pending changes."""
        return [self.apply(c) for c in convs if not self.hidden(c.id)]
