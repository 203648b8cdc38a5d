"""What a chat reply becomes on the wire: reasoning in `reasoning_content` (not in `content`), tool calls as
OpenAI's `tool_calls` (streamed with `index`, and `id`, `type` and the name on each call's first delta),
and `finish_reason: "tool_calls"` whenever a call was made.

The request's tools are checked when it arrives (a 400 before it queues). What depends on the model that
will run it — its template's tool-call format, whether its engine takes grammars, whether its prompt opens
a reasoning block — is decided on the host thread when the job starts (core's `FittedRequest.prepare`), so a JIT load is
served in that model's own format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import Capabilities, GenerateRequest, ModelInfo
from app.core.runtime.fitted_request import FittedRequest
from app.core.tools import (
    OutputEvent,
    OutputParser,
    ParsedOutput,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
    ToolError,
    function_specs,
    parse_tool_choice,
)
from app.core.tools.schema_limits import SchemaTooComplex, check_schema
from app.server.errors import APIError

logger = logging.getLogger(__name__)


def tool_error(exc: ToolError) -> APIError:
    code = "schema_too_complex" if isinstance(exc, SchemaTooComplex) else "invalid_value"
    return APIError(str(exc), param=exc.param, code=code)


def checked_schema(schema: Any, param: str) -> Any:
    """`schema` once it keeps schema_limits' bounds: a 400 naming the field before the request queues
    (what the grammar converter cannot express is found on the host thread, also a 400)."""
    try:
        check_schema(schema, param)
    except SchemaTooComplex as exc:
        raise tool_error(exc) from exc
    return schema


@dataclass
class ChatShape:
    """One chat request's tools and reasoning handling, on the server's loop: checked when the request
    arrives, fitted to its model on the engine host's thread when its job starts (`fitted.prepare`, core
    code: the job carries that, never the server's), and parsed after the job's Started event."""

    base: GenerateRequest
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    parallel: bool
    inline_reasoning: bool = False
    fitted: FittedRequest = field(init=False)

    def __post_init__(self) -> None:
        try:
            parse_tool_choice(self.tool_choice, function_specs(self.tools))
        except ToolError as exc:
            raise tool_error(exc) from exc
        if self.tools and self.tool_choice not in (None, "auto", "none"):
            # A forced call becomes a grammar over every offered tool's parameters.
            for i, tool in enumerate(self.tools):
                params = (tool.get("function") or {}).get("parameters")
                if params:
                    checked_schema(params, f"tools[{i}].function.parameters")
        self.fitted = FittedRequest(self.base, self.tools, self.tool_choice, self.parallel, self.inline_reasoning)

    @property
    def prepare(self) -> Callable[[ModelInfo, Capabilities], GenerateRequest]:
        """What the job carries: the core's fitting, run on the engine host's thread."""
        return self.fitted.prepare

    def parser(self) -> OutputParser:
        """A fresh parser for the reply (reasoning split unless asked inline, then tool calls)."""
        plan = self.fitted.plan
        assert plan is not None, "prepare() runs before the first chunk"
        if self.inline_reasoning:
            return plan.parser(reasoning=None)
        return plan.parser(start_in_reasoning=self.fitted.starts_in_reasoning)

    def parse(self, text: str, truncated: bool = False) -> ParsedOutput:
        """The whole reply; `truncated`: it ended at the token limit (a call it had begun is dropped)."""
        return self.parser().parse(text, truncated)


def message(out: ParsedOutput) -> dict[str, Any]:
    """The assistant message of a whole reply."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": out.content or (None if out.tool_calls else ""),
        "refusal": None,
    }
    if out.reasoning:
        msg["reasoning_content"] = out.reasoning
    if out.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in out.tool_calls
        ]
    return msg


def delta(event: OutputEvent) -> dict[str, Any] | None:
    """The chunk delta for one parser event."""
    if isinstance(event, TextDelta):
        return {"content": event.text} if event.text else None
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text} if event.text else None
    if isinstance(event, ToolCallStart):
        return {
            "tool_calls": [
                {
                    "index": event.index,
                    "id": event.id,
                    "type": "function",
                    "function": {"name": event.name, "arguments": ""},
                }
            ]
        }
    if isinstance(event, ToolCallArgs):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.fragment}}]}
    return None
