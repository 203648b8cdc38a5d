"""The Chat page (issue 6): conversations, streaming replies, rich rendering, presets, stats."""

from app.ui.chat.chat_page import ChatPage

__all__ = ["ChatPage"]
