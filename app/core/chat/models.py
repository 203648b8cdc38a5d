"""Plain records the chat store hands out: conversations, messages (a tree via parent_id) and presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from app.core.engines.base import GenerationStats, SamplingParams
from app.core.errors import HearthError

Role = Literal["system", "user", "assistant", "tool"]
MessageStatus = Literal["done", "streaming", "stopped", "error", "interrupted"]

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
STATUSES: tuple[str, ...] = ("done", "streaming", "stopped", "error", "interrupted")
FINISHED_STATUSES: tuple[str, ...] = ("done", "stopped", "error")


class ChatStoreError(HearthError):
    """Base for chat-history errors; the message is for the user."""


class ChatStoreCorrupt(ChatStoreError):
    """The database failed its integrity check or is not a database at all."""


class ChatStoreWriteError(ChatStoreError):
    """A write could not be saved (disk full, read-only, I/O error); nothing was half-written."""


class ChatNotFound(ChatStoreError, LookupError):
    """No conversation, message or preset with that id (deleted meanwhile, or another conversation's)."""


class ChatImportError(ChatStoreError):
    """An import file was rejected; nothing was written."""


@dataclass(frozen=True)
class Preset:
    id: int
    name: str
    system_prompt: str
    sampling: SamplingParams
    builtin: bool = False


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float
    system_prompt: str = ""
    model_id: str | None = None  # a library id or a model path
    sampling: SamplingParams = field(default_factory=SamplingParams)
    context_length: int | None = None
    preset_id: int | None = None
    active_leaf_id: int | None = None  # the last message of the shown branch
    tool_servers: tuple[str, ...] = ()  # the MCP servers whose tools the model may call here
    doc_collections: tuple[str, ...] = ()  # the document collections searched for each message here


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    parent_id: int | None
    role: Role
    content: str
    status: MessageStatus
    created_at: float
    updated_at: float
    stats: dict[str, Any] | None = None  # GenerationStats as a dict
    finish_reason: str | None = None
    error: str | None = None
    # An assistant turn's tool calls: [{"id", "server", "tool", "arguments"}] (arguments a JSON object).
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None  # a tool turn: the call it answers


def stats_to_dict(stats: GenerationStats | dict[str, Any] | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    if isinstance(stats, GenerationStats):
        return asdict(stats)
    if isinstance(stats, dict):
        return dict(stats)
    raise TypeError(f"stats must be GenerationStats or dict, not {type(stats).__name__}")
