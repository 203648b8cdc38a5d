"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API (what Claude Code
speaks) over the same engine jobs, tool-call parsers and reasoning split as the OpenAI routes.

A stream is `message_start`, each content block's `content_block_start` / `_delta` / `_stop`,
`message_delta` (stop_reason and usage), `message_stop`; `ping` while a long prompt is evaluated; a
failure after the start is an `error` event. Errors are in Anthropic's shape (errors.py), and a prompt
over the context is refused before any byte.

Usage is Anthropic's: `input_tokens` counts what was evaluated, `cache_read_input_tokens` what the prompt
cache reused, so the two add up to the prompt (which is what count_tokens answers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.engines.base import Chunk, GenerateRequest, GenerationStats, SamplingParams
from app.core.runtime.jobs import CountJob, TokenCount
from app.core.tools import ToolCall
from app.server.anthropic.input import conversation, function_tools, tool_choice, tool_input
from app.server.anthropic.schemas import CountTokensRequest, MessagesRequest, PromptFields
from app.server.chat_output import ChatShape, checked_schema
from app.server.context import hearth
from app.server.job_stream import JobStream
from app.server.replies import (
    CLIENT_GONE,
    begin,
    new_id,
    route_sampling,
    usage,
    whole_reply,
)
from app.server.reply_stream import Broken, Finished, Ping, reply_steps, whole_events
from app.server.segments import Appended, Closed, Op, Opened, Segment, Segmenter, segments_of
from app.server.sse import named_sse, sse_response

router = APIRouter()


def _shape(body: PromptFields, sampling: SamplingParams) -> ChatShape:
    choice, parallel = tool_choice(body.tool_choice)
    tools = function_tools(body.tools)
    fmt = body.output_config.format if body.output_config is not None else None
    schema = checked_schema(fmt.schema_, "output_config.format.schema") if fmt is not None else None
    request = GenerateRequest(
        messages=conversation(body), sampling=sampling, json_schema=schema, schema_field="output_config.format.schema"
    )
    return ChatShape(request, tools, choice if tools else None, parallel)


def _sampling(body: MessagesRequest) -> SamplingParams:
    stops = [s for s in body.stop_sequences or [] if s]
    return route_sampling(body.temperature, body.top_p, body.max_tokens, stop=stops, top_k=body.top_k)


def message_usage(stats: GenerationStats | None) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    cached = max(0, prompt - stats.prompt_tokens_evaluated) if stats else 0
    return {
        "input_tokens": prompt - cached,
        "output_tokens": stats.generated_tokens if stats else 0,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def stop_reason(final: Chunk, called: bool) -> tuple[str, str | None]:
    # The token limit first: a reply cut off while it made calls did not end on its own.
    if final.finish_reason == "length":
        return "max_tokens", None
    if called:
        return "tool_use", None
    if final.stop_sequence:
        return "stop_sequence", final.stop_sequence
    return "end_turn", None


def block(segment: Segment, done: bool = True) -> dict[str, Any]:
    """The content block for a segment; not done, it is the opening a stream starts it with."""
    if segment.kind == "reasoning":
        return {"type": "thinking", "thinking": segment.text if done else "", "signature": ""}
    if segment.kind == "text":
        return {"type": "text", "text": segment.text if done else ""}
    call = ToolCall(id=segment.call_id, name=segment.name, arguments=segment.text or "{}")
    return {
        "type": "tool_use",
        "id": _tool_id(segment.call_id),
        "name": segment.name,
        "input": tool_input(call) if done else {},
    }


def _tool_id(call_id: str) -> str:
    # Anthropic's ids begin "toolu_"; a parser's "call_…" id is kept, only its prefix changes.
    return "toolu_" + call_id.removeprefix("call_")


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    ctx = hearth(request)
    shape = _shape(body, _sampling(body))
    begun = await begin(ctx, request, shape.base, body.model, shape.prepare)
    if begun is None:
        return Response(status_code=CLIENT_GONE)
    stream, model = begun
    envelope = {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model}
    if body.stream:
        return sse_response(_stream(envelope, shape, stream, request))
    result = await whole_reply(stream, request)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    segments = segments_of(whole_events(shape, result.text, result.final))
    called = any(s.kind == "tool" for s in segments)
    reason, sequence = stop_reason(result.final, called)
    return JSONResponse(
        {
            **envelope,
            "content": [block(s) for s in segments],
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": message_usage(result.final.stats),
        }
    )


PING = named_sse({"type": "ping"})


def _block_events(ops: list[Op]) -> list[bytes]:
    out = []
    for op in ops:
        index = op.segment.index
        if isinstance(op, Opened):
            out.append(
                named_sse({"type": "content_block_start", "index": index, "content_block": block(op.segment, False)})
            )
        elif isinstance(op, Appended):
            kind = op.segment.kind
            if kind == "text":
                delta = {"type": "text_delta", "text": op.text}
            elif kind == "reasoning":
                delta = {"type": "thinking_delta", "thinking": op.text}
            else:
                delta = {"type": "input_json_delta", "partial_json": op.text}
            out.append(named_sse({"type": "content_block_delta", "index": index, "delta": delta}))
        elif isinstance(op, Closed):
            out.append(named_sse({"type": "content_block_stop", "index": index}))
    return out


async def _stream(
    envelope: dict[str, Any], shape: ChatShape, stream: JobStream, request: Request
) -> AsyncIterator[bytes]:
    segmenter = Segmenter()
    opening = {**envelope, "content": [], "stop_reason": None, "stop_sequence": None, "usage": message_usage(None)}
    yield named_sse({"type": "message_start", "message": opening})
    async for step in reply_steps(stream, shape):
        if isinstance(step, Ping):
            yield PING
        elif isinstance(step, list):
            if events := _block_events(segmenter.feed(step)):
                yield b"".join(events)
        elif isinstance(step, Finished):
            tail = _block_events(segmenter.finish())
            reason, sequence = stop_reason(step.final, step.called)
            request.state.usage = usage(step.final.stats)  # the request log reads one shape
            delta = {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": message_usage(step.final.stats),
            }
            yield b"".join([*tail, named_sse(delta), named_sse({"type": "message_stop"})])
        elif isinstance(step, Broken):
            kind = "overloaded_error" if step.type == "unavailable_error" else "api_error"
            yield named_sse({"type": "error", "error": {"type": kind, "message": step.message}})


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    """The prompt's tokens as the model that would answer renders it, tools included: what a message
    request with this prompt reports as input_tokens plus cache_read_input_tokens."""
    ctx = hearth(request)
    shape = _shape(body, SamplingParams())
    await ctx.check_role(body.model, ("chat",), "counting a chat's tokens")
    host, model = ctx.route(body.model)
    job = CountJob(shape.base, model=model, prepare=shape.prepare)
    done = await JobStream(host, job, request, ctx.streams).result()
    if done is None:
        return Response(status_code=CLIENT_GONE)
    count: TokenCount = done.result
    return JSONResponse({"input_tokens": count.prompt_tokens})
