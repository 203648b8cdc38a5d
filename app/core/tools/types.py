"""The data every tool-call format shares: a finished call, stream events, call ids, errors."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.core.errors import HearthError

__all__ = [
    "IdFactory",
    "OutputEvent",
    "ParsedOutput",
    "ReasoningDelta",
    "TextDelta",
    "ToolCall",
    "ToolCallArgs",
    "ToolCallStart",
    "ToolError",
    "arguments_json",
    "collect",
    "new_call_id",
]

_ALNUM = string.ascii_letters + string.digits

IdFactory = Callable[[], str]


class ToolError(HearthError):
    """A request's tools or tool_choice cannot be used; `param` names the offending field for the API."""

    code = "invalid_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ToolCall(BaseModel):
    """One function call: `arguments` is a JSON text (an object), as the OpenAI API carries it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str = "{}"

    def arguments_dict(self) -> dict[str, Any] | None:
        """The arguments as a dict, or None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class TextDelta:
    """Answer text (content), ready to show."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Reasoning text (what a model thinks before it answers)."""

    text: str


@dataclass(frozen=True)
class ToolCallStart:
    """A call begins: `index` counts calls in this reply from 0; its `ToolCallArgs` follow."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgs:
    """A piece of call `index`'s arguments JSON; the pieces concatenate to the whole text."""

    index: int
    fragment: str


OutputEvent = TextDelta | ReasoningDelta | ToolCallStart | ToolCallArgs


@dataclass
class ParsedOutput:
    """A whole reply, split: answer text, reasoning text, and the calls in order."""

    content: str
    reasoning: str
    tool_calls: list[ToolCall]


def new_call_id(length: int = 24, prefix: str = "call_") -> str:
    """`call_` and 24 random letters and digits (the shape OpenAI clients expect)."""
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(length))


def arguments_json(arguments: dict[str, Any]) -> str:
    """The canonical arguments text: compact JSON, non-ASCII kept as is."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def collect(events: list[OutputEvent]) -> ParsedOutput:
    """Fold a stream of events into the whole reply."""
    content: list[str] = []
    reasoning: list[str] = []
    starts: dict[int, ToolCallStart] = {}
    args: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, TextDelta):
            content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            starts[event.index] = event
            args.setdefault(event.index, [])
        else:
            args.setdefault(event.index, []).append(event.fragment)
    calls = [
        ToolCall(id=start.id, name=start.name, arguments="".join(args.get(index, [])))
        for index, start in sorted(starts.items())
    ]
    return ParsedOutput("".join(content), "".join(reasoning), calls)
