"""Unsent text stays with its conversation: what was typed in one chat is put back when it is opened again,
and a chat opened (or created with Ctrl+N) starts with its own text, empty if it has none."""

from __future__ import annotations

from app.ui.chat.composer import ComposerBox


class UnsentDrafts:
    """Kept for this session only; the composer shows the open conversation's draft."""

    def __init__(self, composer: ComposerBox) -> None:
        self.composer = composer
        self._by_conversation: dict[int, str] = {}

    def switch(self, leaving: int | None, arriving: int, editing: bool) -> None:
        """`leaving` (None: no chat was open) for `arriving`. A message being edited is not a draft: it
        belongs to the message, and the edit ends when another chat opens."""
        if leaving == arriving:
            return
        if leaving is None:
            # Typed before any chat existed (a first send creates one): it stays, unless empty.
            if not self.composer.text().strip():
                self.composer.set_text(self._by_conversation.pop(arriving, ""))
            return
        self.keep(leaving, "" if editing else self.composer.text())
        self.composer.set_text(self._by_conversation.pop(arriving, ""))

    def keep(self, conv_id: int, text: str) -> None:
        if text.strip():
            self._by_conversation[conv_id] = text
        else:
            self._by_conversation.pop(conv_id, None)

    def draft(self, conv_id: int) -> str:
        """The text kept for a conversation not shown now ("" if none)."""
        return self._by_conversation.get(conv_id, "")

    def forget(self, conv_id: int) -> None:
        """The conversation is deleted."""
        self._by_conversation.pop(conv_id, None)
