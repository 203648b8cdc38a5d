"""Chat history and context policy (Qt-free): the model layer under the chat page."""

from app.core.chat.context import ContextNotice, ContextPlan, fit_context, history_for_request
from app.core.chat.models import (
    ChatImportError,
    ChatNotFound,
    ChatStoreCorrupt,
    ChatStoreError,
    ChatStoreWriteError,
    Conversation,
    Message,
    MessageStatus,
    Preset,
)
from app.core.chat.store import ChatStore

__all__ = [
    "ChatImportError",
    "ChatNotFound",
    "ChatStore",
    "ChatStoreCorrupt",
    "ChatStoreError",
    "ChatStoreWriteError",
    "ContextNotice",
    "ContextPlan",
    "Conversation",
    "Message",
    "MessageStatus",
    "Preset",
    "fit_context",
    "history_for_request",
]
