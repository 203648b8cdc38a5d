"""From a request's tools, tool_choice and parallel_tool_calls to what the engine and the parser need."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.core.tools.families import ToolFormat, detect_format
from app.core.tools.output import OutputParser
from app.core.tools.reasoning import DEFAULT_MARKERS, ReasoningMarkers, ReasoningSplitter
from app.core.tools.scanner import ToolCallParser
from app.core.tools.spec import FunctionSpec, ToolChoice, function_specs, parse_tool_choice
from app.core.tools.types import IdFactory, ParsedOutput

logger = logging.getLogger(__name__)

__all__ = ["ToolPlan", "plan_tools"]


@dataclass(frozen=True)
class ToolPlan:
    format: ToolFormat
    specs: list[FunctionSpec]
    choice: ToolChoice
    parallel: bool
    template_tools: list[dict[str, Any]] | None  # for GenerateRequest.tools (None: the model is not told)
    grammar: str | None  # for GenerateRequest.grammar: forces the call(s) for "required" / a named function

    @property
    def max_calls(self) -> int | None:
        if self.choice.mode == "none":
            return 0
        return None if self.parallel and self.choice.mode != "function" else 1

    def calls_parser(self, *, new_id: IdFactory | None = None) -> ToolCallParser:
        family = None if self.choice.mode == "none" else self.format.get()
        schemas = {spec.name: spec.parameters or {} for spec in self.specs}
        return ToolCallParser(family, schemas=schemas, max_calls=self.max_calls, new_id=new_id)

    def parser(
        self,
        *,
        reasoning: tuple[ReasoningMarkers, ...] | None = DEFAULT_MARKERS,
        start_in_reasoning: bool = False,
        new_id: IdFactory | None = None,
    ) -> OutputParser:
        """A fresh parser for one reply. `reasoning=None` leaves reasoning markers in the answer."""
        splitter = None
        if reasoning is not None:
            splitter = ReasoningSplitter(reasoning, start_in_reasoning=start_in_reasoning)
        return OutputParser(self.calls_parser(new_id=new_id), splitter)

    def parse(
        self,
        text: str,
        *,
        reasoning: tuple[ReasoningMarkers, ...] | None = DEFAULT_MARKERS,
        start_in_reasoning: bool = False,
        new_id: IdFactory | None = None,
    ) -> ParsedOutput:
        """A whole (non-streamed) reply → content, reasoning, calls."""
        return self.parser(reasoning=reasoning, start_in_reasoning=start_in_reasoning, new_id=new_id).parse(text)


def plan_tools(
    tools: list[dict[str, Any]] | None,
    tool_choice: str | dict[str, Any] | None = None,
    *,
    parallel_tool_calls: bool = True,
    chat_template: str | None = None,
    tool_format: ToolFormat | None = None,
    grammar: bool = True,
) -> ToolPlan:
    """Validate the request's tool fields and decide the format, the grammar and the parser.

    - "none": the tools are not rendered and nothing is parsed as a call;
    - "auto": tools rendered, calls parsed, no grammar;
    - "required" / a named function: a grammar forces one call ("required" with parallel calls:
      one or more) unless `grammar` is false (an engine without grammars), when the model is only asked to.
    Raises ToolError (a HearthError) for a bad tool list or choice; the message is for the client.
    """
    specs = function_specs(tools)
    choice = parse_tool_choice(tool_choice, specs)
    fmt = tool_format or detect_format(chat_template)
    forced: list[FunctionSpec] = []
    if choice.mode == "required":
        forced = specs
    elif choice.mode == "function":
        forced = [spec for spec in specs if spec.name == choice.name]
    text = None
    if forced and grammar:
        many = parallel_tool_calls and choice.mode == "required"  # a named function is called once
        text = fmt.get().grammar(forced, parallel=many, variant=fmt.variant)
    elif forced:
        logger.info("tool_choice %s without a grammar: the engine cannot force the call", choice.mode)
    template_tools = list(tools) if tools and choice.mode != "none" else None
    return ToolPlan(fmt, specs, choice, parallel_tool_calls, template_tools, text)
