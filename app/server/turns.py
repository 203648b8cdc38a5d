"""Conversation shaping every agent route shares, after its own wire format is read."""

from __future__ import annotations

from app.core.engines.base import ChatMessage


def merge_leading_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """One system turn first: agents send instructions plus developer notes, and many templates accept
    a system message only at the start."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    if lead < 2:
        return messages
    joined = "\n\n".join(m.content for m in messages[:lead] if m.content)
    return [ChatMessage(role="system", content=joined), *messages[lead:]]
