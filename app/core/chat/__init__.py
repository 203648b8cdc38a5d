"""Chat history, its writer and the context policy (Qt-free): the model layer under the chat page."""

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
from app.core.chat.operations import ChatOperations, SavedTurn
from app.core.chat.store import ChatStore

__all__ = [
    "ChatImportError",
    "ChatNotFound",
    "ChatOperations",
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
    "SavedTurn",
    "fit_context",
    "history_for_request",
]
