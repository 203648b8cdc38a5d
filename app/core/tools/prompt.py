"""Tools for chat templates: the dicts HF templates expect, and the fallback for templates without tools.

The fallback (a template that never reads `tools`): the tool list and the hermes call format go into
the system prompt, earlier calls become <tool_call> blocks in the assistant's text, and tool results
become <tool_response> blocks in a user turn. It is the format `hermes` parses, the default family.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.tools.hermes import CLOSE, OPEN
from app.core.tools.types import ToolCall

__all__ = [
    "FALLBACK_NOTICE",
    "calls_as_text",
    "fallback_system_prompt",
    "fallback_turns",
    "template_call",
    "tool_result_as_text",
]

FALLBACK_NOTICE = "the chat template has no tool support; Hearth described the tools in the system prompt"

_INSTRUCTIONS = (
    "# Tools\n\n"
    "You may call one or more functions to help with the user's request. "
    "The functions are described by JSON schemas inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, reply with a JSON object holding its name and arguments inside "
    "<tool_call></tool_call> tags, one block per call:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <arguments-as-a-JSON-object>}}\n</tool_call>\n'
    "Each result comes back inside <tool_response></tool_response> tags."
)


def fallback_system_prompt(tools: list[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return _INSTRUCTIONS.format(tools=lines)


def _arguments_value(call: ToolCall) -> Any:
    parsed = call.arguments_dict()
    return parsed if parsed is not None else call.arguments


def template_call(call: ToolCall) -> dict[str, Any]:
    """The shape HF templates read: arguments as a dict (templates `tojson` it), a string if not JSON."""
    return {"type": "function", "id": call.id, "function": {"name": call.name, "arguments": _arguments_value(call)}}


def calls_as_text(content: str, calls: list[ToolCall]) -> str:
    """An assistant turn's text with its calls written as hermes blocks."""
    blocks = [
        f"{OPEN}\n{json.dumps({'name': c.name, 'arguments': _arguments_value(c)}, ensure_ascii=False)}\n{CLOSE}"
        for c in calls
    ]
    return "\n".join([content, *blocks] if content else blocks)


def tool_result_as_text(content: str) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def fallback_turns(
    turns: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    describe_tools: bool,
    text_calls: bool,
    into_user: bool = False,
) -> list[dict[str, Any]]:
    """Rewrite turns ({role, content, name?, tool_calls?: [ToolCall], tool_call_id?}) for a template
    that lacks tools (`describe_tools`: put the tool list in the system prompt, or with `into_user` at
    the top of the first user turn, for templates that refuse a system turn) or lacks tool calls
    (`text_calls`: calls and results become text)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        turn = dict(turn)
        if text_calls and turn.get("tool_calls"):
            turn["content"] = calls_as_text(turn.get("content", ""), turn.pop("tool_calls"))
        if text_calls and turn["role"] == "tool":
            text = tool_result_as_text(turn.get("content", ""))
            if out and out[-1].get("from_tool"):  # results of one round go in one user turn
                out[-1]["content"] += "\n" + text
                continue
            turn = {"role": "user", "content": text, "from_tool": True}
        out.append(turn)
    for turn in out:
        turn.pop("from_tool", None)
    if describe_tools and tools:
        prompt = fallback_system_prompt(tools)
        role = "user" if into_user else "system"
        first = next((i for i, t in enumerate(out) if t["role"] == role), None)
        if first is not None and into_user:
            out[first] = {**out[first], "content": f"{prompt}\n\n{out[first]['content']}"}
        elif first == 0:
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}".lstrip()}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out
