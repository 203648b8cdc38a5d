"""From an Anthropic Messages request to the conversation a chat template renders: `system` first, text
blocks as turns, an assistant's `tool_use` blocks as its tool calls, a user's `tool_result` blocks as
tool turns (before the text that follows them), `thinking` not sent back; tools as OpenAI functions and
tool_choice in Chat Completions' form, so the same parsers and grammars serve both APIs."""

from __future__ import annotations

import json
from typing import Any

from app.core.engines.base import ChatMessage
from app.core.tools import ToolCall
from app.core.tools.types import arguments_json
from app.server.anthropic.schemas import MessageIn, PromptFields, ToolChoiceIn, ToolIn
from app.server.errors import APIError
from app.server.image_input import PartsText, WebImage, decode_base64, image_bytes
from app.server.turns import merge_leading_system

SKIPPED_BLOCKS = ("thinking", "redacted_thinking")
ERROR_PREFIX = "Error: "  # a template has no field for a failed tool; the model reads it in the text


def _text_blocks(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise APIError(f"{where} must be a string or a list of blocks", param=where)
    texts = []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in SKIPPED_BLOCKS:
            continue
        else:
            raise APIError(
                f"this model reads text only; {where}.{j} is a {str(kind)[:40]} block",
                param=f"{where}.{j}",
                code="unsupported_content",
            )
    return "".join(texts)


def system_text(system: str | list[dict[str, Any]] | None) -> str:
    return _text_blocks(system, "system") if system is not None else ""


def _turns(i: int, message: MessageIn, names: dict[str, str]) -> list[ChatMessage]:
    where = f"messages.{i}.content"
    if message.role == "system":
        return [ChatMessage(role="system", content=_text_blocks(message.content, where))]
    if isinstance(message.content, str):
        return [ChatMessage(role=message.role, content=message.content)]
    parts = PartsText()
    calls: list[ToolCall] = []
    results: list[ChatMessage] = []
    for j, block in enumerate(message.content):
        at = f"{where}.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.text(block["text"])
        elif kind == "image" and message.role == "user":
            parts.image(_image(block, at))
        elif kind in SKIPPED_BLOCKS:
            continue
        elif kind == "tool_use" and message.role == "assistant":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise APIError(f"{at} needs an id and a name", param=at)
            if not isinstance(args, dict):
                raise APIError(f"{at}.input must be an object", param=f"{at}.input")
            names[call_id] = name
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments_json(args)))
        elif kind == "tool_result" and message.role == "user":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise APIError(f"{at} needs tool_use_id", param=f"{at}.tool_use_id")
            text = _text_blocks(block.get("content", ""), f"{at}.content")
            if block.get("is_error"):
                text = ERROR_PREFIX + text
            results.append(ChatMessage(role="tool", content=text, tool_call_id=call_id, name=names.get(call_id)))
        else:
            raise APIError(
                f"{at} is a {str(kind)[:40]!r} block, which a {message.role} message here cannot carry",
                param=at,
                code="unsupported_content",
            )
    if message.role == "assistant":
        return [parts.message("assistant", tool_calls=calls or None)]
    return results + ([parts.message("user")] if parts.texts or parts.images or not results else [])


def _image(block: dict[str, Any], at: str) -> bytes | WebImage:
    """An image block's bytes: a base64 source (its media type an image's), or a URL (fetched only if allowed)."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise APIError(f"{at}: an image block needs a source", param=f"{at}.source")
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return image_bytes(source["url"], f"{at}.source.url")
    data, media = source.get("data"), source.get("media_type")
    if source.get("type") != "base64" or not isinstance(data, str):
        raise APIError(f"{at}: an image block's source must be base64 data or a url", param=f"{at}.source")
    if not isinstance(media, str) or not media.startswith("image/"):
        raise APIError(f"{at}.source.media_type must be an image type", param=f"{at}.source.media_type")
    return decode_base64(data, f"{at}.source.data")


def conversation(body: PromptFields) -> list[ChatMessage]:
    out = [ChatMessage(role="system", content=text)] if (text := system_text(body.system)) else []
    names: dict[str, str] = {}  # tool_use id → tool name, for the results that answer them
    for i, message in enumerate(body.messages):
        out += _turns(i, message, names)
    return merge_leading_system(out)


def function_tools(tools: list[ToolIn] | None) -> list[dict[str, Any]] | None:
    """Client tools as OpenAI functions. Server tools (web search, code execution) run on Anthropic's
    side; no local model can call them, so they are left out, as a client's optional extras are."""
    out = []
    for tool in tools or []:
        if tool.input_schema is None:
            continue
        fn: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description:
            fn["description"] = tool.description
        out.append({"type": "function", "function": fn})
    return out or None


def tool_choice(choice: ToolChoiceIn | None) -> tuple[Any, bool]:
    """(tool_choice in Chat Completions' form, whether parallel calls are allowed)."""
    if choice is None:
        return None, True
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "any":
        return "required", parallel
    if choice.type == "tool":
        if not choice.name:
            raise APIError("tool_choice of type tool needs a name", param="tool_choice.name")
        return {"type": "function", "function": {"name": choice.name}}, parallel
    return choice.type, parallel


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the `input` object of a tool_use block (text that is not an object: wrapped)."""
    args = call.arguments_dict()
    if args is not None:
        return args
    try:
        return {"value": json.loads(call.arguments)}
    except ValueError:
        return {"text": call.arguments}
