"""Request bodies of Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): its
required fields required (`max_tokens` on a message), its bounds kept, fields it added later accepted and
ignored. Content blocks are checked one by one in input.py, so an error names the block."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.server.request_fields import MAX_MESSAGES, MAX_STOP, MAX_STOP_CHARS, MAX_TOKENS_CAP, RequestBase


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MessageIn(_Lenient):
    # "system" turns inside `messages`: Claude Code sends them (agent lists, reminders) beside `system`.
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class ToolIn(_Lenient):
    """A client tool (`input_schema`), or one of Anthropic's server tools (a `type` and no schema)."""

    name: str = Field(min_length=1, max_length=128)
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoiceIn(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingIn(_Lenient):
    # Accepted as the API has it; a local model reasons as its template and weights make it.
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=0)


class OutputFormatIn(_Lenient):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema", min_length=1)


class OutputConfigIn(_Lenient):
    format: OutputFormatIn | None = None
    effort: str | None = None  # accepted; a local model's effort is its template's


class PromptFields(RequestBase):
    """The prompt half of a Messages body: what a message request and count_tokens both take."""

    model: str | None = Field(default=None, max_length=512)
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)
    system: str | list[dict[str, Any]] | None = None
    tools: list[ToolIn] | None = Field(default=None, max_length=512)
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None
    output_config: OutputConfigIn | None = None  # structured output: the JSON schema is enforced by grammar


class MessagesRequest(PromptFields):
    max_tokens: int = Field(ge=1, le=MAX_TOKENS_CAP)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, le=100_000)
    stop_sequences: list[str] | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _check_stop(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (len(value) > MAX_STOP or any(len(s) > MAX_STOP_CHARS for s in value)):
            raise ValueError(f"at most {MAX_STOP} stop sequences of up to {MAX_STOP_CHARS} characters")
        return value


class CountTokensRequest(PromptFields):
    """What count_tokens takes: the prompt half of a message request."""
