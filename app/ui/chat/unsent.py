"""Unsent drafts stay with their conversation: what was typed (and the images attached) in one chat is put
back when it is opened again, and a chat opened (or created with Ctrl+N) starts with its own, empty if it has
none."""

from __future__ import annotations

from app.ui.chat.composer import ComposerBox, Draft


class UnsentDrafts:
    """Kept for this session only; the composer shows the open conversation's draft."""

    def __init__(self, composer: ComposerBox) -> None:
        self.composer = composer
        self._by_conversation: dict[int, Draft] = {}

    def switch(self, leaving: int | None, arriving: int, editing: bool) -> None:
        """`leaving` (None: no chat was open) for `arriving`. A message being edited is not a draft: it
        belongs to the message, and the edit ends when another chat opens."""
        if leaving == arriving:
            return
        if leaving is None:
            # Typed before any chat existed (a first send creates one): it stays, unless empty.
            if self.composer.draft().empty:
                self.composer.set_draft(self._by_conversation.pop(arriving, Draft()))
            return
        self.keep(leaving, Draft() if editing else self.composer.draft())
        self.composer.set_draft(self._by_conversation.pop(arriving, Draft()))

    def keep(self, conv_id: int, draft: Draft) -> None:
        if not draft.empty:
            self._by_conversation[conv_id] = draft
        else:
            self._by_conversation.pop(conv_id, None)

    def draft(self, conv_id: int) -> str:
        """The text kept for a conversation not shown now ("" if none)."""
        return self._by_conversation.get(conv_id, Draft()).text

    def forget(self, conv_id: int) -> None:
        """The conversation is deleted."""
        self._by_conversation.pop(conv_id, None)
