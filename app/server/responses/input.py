"""From a Responses API request to the conversation a chat template renders, and back: input items
(messages, function and custom tool calls and their outputs, reasoning) become chat messages; tools
become OpenAI function tools (a custom tool as a function taking one string, `input`).

Items are checked here one by one, so an error names the item (`input.3.call_id`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import ChatMessage
from app.core.tools import ToolCall
from app.core.tools.types import arguments_json
from app.server.errors import APIError
from app.server.image_input import PartsText, image_bytes
from app.server.responses.schemas import (
    HOSTED_TOOLS,
    LEFT_OUT_TOOLS,
    CustomToolR,
    FileSearchToolR,
    FunctionToolR,
    NamespaceToolR,
    ResponsesRequest,
)

TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
CUSTOM_INPUT = "input"  # the one parameter a custom tool's function takes


def custom_parameters(tool: CustomToolR) -> dict[str, Any]:
    about = "the tool's whole input, as free text"
    if tool.format and tool.format.get("type") == "grammar" and isinstance(tool.format.get("definition"), str):
        about += f" in this {tool.format.get('syntax', 'grammar')} grammar:\n{tool.format['definition'][:4000]}"
    return {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": about}},
        "required": [CUSTOM_INPUT],
    }


@dataclass
class Tools:
    """The request's tools as the template and the tool-call parser see them."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    custom: set[str] = field(default_factory=set)  # names whose calls go out as custom_tool_call
    # The name the model sees → (namespace, the tool's own name), for tools inside a namespace.
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The file_search tool, which the server runs before the model answers (file_search.py), and its place.
    file_search: FileSearchToolR | None = None
    file_search_param: str = "tools"

    def wire(self, name: str) -> tuple[str, str | None]:
        """(the name a call goes out with, its namespace or None) for a name the model called."""
        ns, own = self.namespaced.get(name, (None, name))
        return own, ns

    def seen_as(self, name: str, namespace: str | None) -> str:
        """The name the model knows a tool by, from a call item's name and namespace."""
        if namespace:
            for exposed, where in self.namespaced.items():
                if where == (namespace, name):
                    return exposed
        return name

    def add(self, tool: FunctionToolR | CustomToolR, namespace: str | None = None) -> None:
        taken = {f["function"]["name"] for f in self.functions}
        exposed = tool.name if tool.name not in taken else f"{namespace}.{tool.name}"
        described = tool.description
        if namespace:
            self.namespaced[exposed] = (namespace, tool.name)
        if isinstance(tool, FunctionToolR):
            fn = {"name": exposed, "description": described, "parameters": tool.parameters}
        else:
            fn = {"name": exposed, "description": described, "parameters": custom_parameters(tool)}
            self.custom.add(exposed)
        self.functions.append({"type": "function", "function": {k: v for k, v in fn.items() if v is not None}})

    def custom_input(self, call: ToolCall) -> str:
        """The free text of a custom tool's call: its `input`, or the raw text if the model wrote other JSON."""
        args = call.arguments_dict()
        if args is not None and isinstance(args.get(CUSTOM_INPUT), str):
            return str(args[CUSTOM_INPUT])
        return call.arguments


def tools_of(body: ResponsesRequest) -> Tools:
    out = Tools()
    for i, tool in enumerate(body.tools or []):
        if isinstance(tool, (FunctionToolR, CustomToolR)):
            out.add(tool)
        elif isinstance(tool, NamespaceToolR):
            for inner in tool.tools:
                out.add(inner, tool.name)
        elif isinstance(tool, FileSearchToolR):
            if out.file_search is not None:
                raise APIError("offer one file_search tool", param=f"tools[{i}]", code="invalid_value")
            out.file_search, out.file_search_param = tool, f"tools[{i}]"
        elif tool.type == "file_search":  # its fields did not validate as FileSearchToolR
            raise APIError(
                "the file_search tool takes vector_store_ids (1 to 16), max_num_results (1 to 50) and "
                "ranking_options.score_threshold (0 to 1)",
                param=f"tools[{i}]",
                code="invalid_value",
            )
        elif tool.type in HOSTED_TOOLS:
            raise APIError(
                f"the tool type {tool.type!r} is a hosted tool: this server runs no hosted tools of that type "
                "(offer it as a function tool, whose calls your client runs)",
                param=f"tools[{i}]",
                code="unsupported_tool",
            )
        elif tool.type not in LEFT_OUT_TOOLS:
            raise APIError(
                f"the tool type {tool.type[:60]!r} is not supported here (function and custom tools are)",
                param=f"tools[{i}]",
                code="unsupported_tool",
            )
    return out


def chat_tool_choice(choice: Any) -> Any:
    """Responses' tool_choice in Chat Completions' form: `{"type": "function"|"custom", "name"}` names a tool."""
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom") and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return choice.get("mode", "auto")
    return choice


def _text(content: Any, where: str) -> str:
    parts = _parts(content, where, images=False)
    return "".join(parts.texts)


def _parts(content: Any, where: str, images: bool = True) -> PartsText:
    """A message's text parts and (where `images`) its input_image parts, in order."""
    parts = PartsText()
    if content is None:
        return parts
    if isinstance(content, str):
        parts.text(content)
        return parts
    if not isinstance(content, list):
        raise APIError(f"{where} must be a string or a list of parts", param=where)
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.text(part["text"])
        elif kind == "refusal":
            parts.text(str(part.get("refusal", "")))
        elif kind == "input_image" and images and isinstance(part.get("image_url"), str):
            parts.image(image_bytes(part["image_url"], f"{where}.{j}.image_url"))
        else:
            what = "an input_image needs an image_url (a data: URI; file ids are not kept here)"
            raise APIError(
                what if kind == "input_image" and images else f"{where}.{j} is a {str(kind)[:40]} part, not text",
                param=f"{where}.{j}",
                code="unsupported_content",
            )
    return parts


def _need(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise APIError(f"{where} needs {name} (a non-empty string)", param=f"{where}.{name}")
    return value[:100_000]


def input_messages(items: str | list[dict[str, Any]], tools: Tools | None = None) -> list[ChatMessage]:
    """The chat turns of a request's input. A run of calls joins the assistant turn before it, as chat
    templates expect one assistant message carrying all of a step's calls."""
    if isinstance(items, str):
        return [ChatMessage(role="user", content=items)] if items else []
    tools = tools or Tools()
    out: list[ChatMessage] = []
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise APIError(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(f"{where}.role must be user, assistant, system or developer", param=f"{where}.role")
            parts = _parts(item.get("content"), f"{where}.content")
            out.append(parts.message("system" if role == "developer" else role))
        elif kind in ("function_call", "custom_tool_call"):
            call_id = _need(item, "call_id", where)
            namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
            name = tools.seen_as(_need(item, "name", where), namespace)
            if kind == "function_call":
                arguments = item.get("arguments") if isinstance(item.get("arguments"), str) else "{}"
            else:
                arguments = arguments_json({CUSTOM_INPUT: str(item.get("input", ""))})
            call = ToolCall(id=call_id, name=name, arguments=arguments or "{}")
            if out and out[-1].role == "assistant":
                out[-1] = out[-1].model_copy(update={"tool_calls": [*(out[-1].tool_calls or []), call]})
            else:
                out.append(ChatMessage(role="assistant", content="", tool_calls=[call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = _need(item, "call_id", where)
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{where}.output")
            out.append(ChatMessage(role="tool", content=text, tool_call_id=call_id))
        elif kind == "reasoning":
            continue  # what the model thought is not sent back to it, as in Chat Completions
        else:
            raise APIError(
                f"{where} is a {str(kind)[:60]!r} item, which this server does not take",
                param=f"{where}.type",
                code="unsupported_item",
            )
    return out


def conversation_dump(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]  # images as base64


def conversation_load(dumps: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(d) for d in dumps]


def items_json(items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input as items (a string input is one user message), for input_items listings."""
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    return json.loads(json.dumps(items))
