"""Tool calling and reasoning, once for every API surface: formats per model family (parse whole and
streamed, grammars that force a call), tool_choice, the reasoning split, and tools in the prompt.

Pure Python; llama-cpp-python is imported only to build a grammar. A route handler:

    plan = plan_tools(body.tools, body.tool_choice, parallel_tool_calls=body.parallel_tool_calls,
                      chat_template=info.chat_template, grammar=engine.capabilities.grammar)  # ToolError → 400
    request = GenerateRequest(messages=..., tools=plan.template_tools, grammar=plan.grammar, ...)
    parser = plan.parser(start_in_reasoning=...)       # one per reply
    for chunk in chunks:                               # streamed: events → deltas
        for event in parser.feed(chunk.text): ...      # TextDelta, ReasoningDelta, ToolCallStart, ToolCallArgs
    for event in parser.finish(): ...
    out = plan.parse(text)                             # not streamed: content, reasoning, tool_calls
"""

from __future__ import annotations

from app.core.tools.families import DEFAULT_FAMILY, FAMILIES, OUTPUT_MARKERS, ToolFormat, detect_format, get_family
from app.core.tools.output import OutputParser
from app.core.tools.plan import ToolPlan, plan_tools
from app.core.tools.reasoning import (
    CHAT_MARKERS,
    DEFAULT_MARKERS,
    ReasoningMarkers,
    ReasoningSplit,
    ReasoningSplitter,
    detect_reasoning_markers,
    prompt_opens_reasoning,
    split_reasoning,
)
from app.core.tools.scanner import Family, ToolCallParser
from app.core.tools.spec import FunctionSpec, ToolChoice, function_specs, parse_tool_choice
from app.core.tools.types import (
    OutputEvent,
    ParsedOutput,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolError,
    collect,
    new_call_id,
)

__all__ = [
    "CHAT_MARKERS",
    "DEFAULT_FAMILY",
    "DEFAULT_MARKERS",
    "FAMILIES",
    "OUTPUT_MARKERS",
    "Family",
    "FunctionSpec",
    "OutputEvent",
    "OutputParser",
    "ParsedOutput",
    "ReasoningDelta",
    "ReasoningMarkers",
    "ReasoningSplit",
    "ReasoningSplitter",
    "TextDelta",
    "ToolCall",
    "ToolCallArgs",
    "ToolCallParser",
    "ToolCallStart",
    "ToolChoice",
    "ToolError",
    "ToolFormat",
    "ToolPlan",
    "collect",
    "detect_format",
    "detect_reasoning_markers",
    "function_specs",
    "get_family",
    "new_call_id",
    "parse_tool_choice",
    "plan_tools",
    "prompt_opens_reasoning",
    "split_reasoning",
]
