"""`POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`: OpenAI's Responses API (what Codex CLI
speaks) over the same engine jobs, tool-call parsers and reasoning split as Chat Completions.

A stream is `response.created`, `response.in_progress`, each item's events, then `response.completed`
(or `response.incomplete` at max_output_tokens); a failure after the start is `response.failed`, never a
stream that just ends. A prompt over the context is refused before any byte (400)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.engines.base import ChatMessage, GenerateRequest, SamplingParams
from app.server.chat_output import ChatShape, checked_schema
from app.server.context import ServerContext, hearth
from app.server.errors import APIError
from app.server.job_stream import JobStream
from app.server.replies import (
    CLIENT_GONE,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    UINT32,
    begin,
    new_id,
    now,
    route_sampling,
    usage,
    whole_reply,
)
from app.server.reply_stream import Broken, Finished, Ping, reply_steps, whole_events
from app.server.responses.file_search import FileSearch, run_file_search
from app.server.responses.input import (
    Tools,
    chat_tool_choice,
    conversation_dump,
    conversation_load,
    input_messages,
    items_json,
    tools_of,
)
from app.server.responses.output import Output
from app.server.responses.schemas import ResponsesRequest
from app.server.responses.store import Stored
from app.server.segments import Segmenter, segments_of
from app.server.sse import PING, named_sse, sse_response
from app.server.turns import merge_leading_system

router = APIRouter()


@dataclass
class Prepared:
    request: GenerateRequest
    shape: ChatShape
    tools: Tools
    context: list[ChatMessage]  # the conversation without the instructions: what a stored response keeps


def read_input(body: ResponsesRequest, ctx: ServerContext) -> tuple[Tools, list[ChatMessage], list[ChatMessage]]:
    """The request's tools, its conversation (what a stored response keeps) and the messages the model reads
    (the instructions first)."""
    context: list[ChatMessage] = []
    if body.previous_response_id:
        stored = ctx.responses.get(body.previous_response_id)
        if stored is None:
            raise APIError(
                f"Previous response with id {body.previous_response_id!r} not found.",
                param="previous_response_id",
                code="previous_response_not_found",
                status=404,
            )
        context = conversation_load(stored.conversation)
    tools = tools_of(body)
    context += input_messages(body.input, tools)
    if not any(m.role != "system" for m in context):
        raise APIError("input has no message for the model to answer", param="input", code="invalid_value")
    messages = ([ChatMessage(role="system", content=body.instructions)] if body.instructions else []) + context
    return tools, context, messages


def build(body: ResponsesRequest, tools: Tools, context: list[ChatMessage], messages: list[ChatMessage]) -> Prepared:
    schema = None
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type == "json_object":
        schema = {"type": "object"}
    elif fmt is not None and fmt.type == "json_schema":
        if not fmt.schema_:
            raise APIError("text.format json_schema needs a schema", param="text.format.schema")
        schema = checked_schema(fmt.schema_, "text.format.schema")
    request = GenerateRequest(
        messages=merge_leading_system(messages),
        sampling=_sampling(body),
        json_schema=schema,
        schema_field="text.format.schema",
    )
    shape = ChatShape(
        request, tools.functions or None, chat_tool_choice(body.tool_choice), body.parallel_tool_calls is not False
    )
    return Prepared(request, shape, tools, context)


def _sampling(body: ResponsesRequest) -> SamplingParams:
    return route_sampling(
        body.temperature,
        body.top_p,
        body.max_output_tokens,
        seed=None if body.seed is None else body.seed & UINT32,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        top_k=body.top_k,
        min_p=body.min_p,
        repeat_penalty=body.repeat_penalty,
    )


def envelope(body: ResponsesRequest, model: str) -> dict[str, Any]:
    """What every response object of this request says besides its output: the request's settings."""
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    text_format = fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else {"type": "text"}
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": now(),
        "model": model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": body.store,
        "temperature": DEFAULT_TEMPERATURE if body.temperature is None else body.temperature,
        "text": {"format": text_format},
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "top_p": DEFAULT_TOP_P if body.top_p is None else body.top_p,
        "truncation": "disabled",
        "user": body.user,
    }


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    ctx = hearth(request)
    tools, context, messages = read_input(body, ctx)
    search: FileSearch | None = None
    if tools.file_search is not None:  # run here, before the model answers (file_search.py)
        search, messages = await run_file_search(
            ctx, tools.file_search, tools.file_search_param, messages, body.include
        )
    prepared = build(body, tools, context, messages)
    begun = await begin(ctx, request, prepared.request, body.model, prepared.shape.prepare)
    if begun is None:
        return Response(status_code=CLIENT_GONE)
    stream, model = begun
    output = Output(
        envelope(body, model),
        prepared.tools,
        lead=[search.item] if search is not None else None,
        annotate=search.annotations if search is not None else None,
    )
    if body.stream:
        return sse_response(_stream(ctx, body, prepared, output, stream, request))
    result = await whole_reply(stream, request)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    segments = segments_of(whole_events(prepared.shape, result.text, result.final))
    response = output.finished(segments, result.final)
    await _store(ctx, body, prepared, output, segments, response)
    return JSONResponse(response)


async def _stream(
    ctx: ServerContext,
    body: ResponsesRequest,
    prepared: Prepared,
    output: Output,
    stream: JobStream,
    request: Request,
) -> AsyncIterator[bytes]:
    segmenter = Segmenter()
    yield named_sse(output.event("response.created", response=output.response("in_progress")))
    yield named_sse(output.event("response.in_progress", response=output.response("in_progress")))
    if lead := output.lead_events():
        yield b"".join(named_sse(e) for e in lead)
    async for step in reply_steps(stream, prepared.shape):
        if isinstance(step, Ping):
            yield PING
        elif isinstance(step, list):
            if events := output.events(segmenter.feed(step)):
                yield b"".join(named_sse(e) for e in events)
        elif isinstance(step, Finished):
            tail = output.events(segmenter.finish())
            response = output.finished(segmenter.segments, step.final)
            request.state.usage = usage(step.final.stats)  # the request log reads one shape
            kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
            await _store(ctx, body, prepared, output, segmenter.segments, response)
            yield b"".join(named_sse(e) for e in [*tail, output.event(kind, response=response)])
        elif isinstance(step, Broken):
            tail = output.events(segmenter.finish())
            error = {"code": step.code, "message": step.message}
            failed = output.event("response.failed", response=output.response("failed", error=error))
            yield b"".join(named_sse(e) for e in [*tail, failed])


async def _store(
    ctx: ServerContext,
    body: ResponsesRequest,
    prepared: Prepared,
    output: Output,
    segments: list,
    response: dict[str, Any],
) -> None:
    if not body.store:
        return
    turn = output.assistant_turn(segments)
    conversation = conversation_dump(prepared.context + ([turn] if turn is not None else []))
    items = [{"id": new_id("msg_"), **item} if "id" not in item else item for item in items_json(body.input)]
    stored = Stored(response, conversation, items)
    await asyncio.to_thread(ctx.responses.put, stored)  # it may write the file the user allowed


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    return _find(hearth(request), response_id).response


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(response_id: str, request: Request) -> dict[str, Any]:
    items = _find(hearth(request), response_id).input_items
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    _find(ctx, response_id)
    await asyncio.to_thread(ctx.responses.delete, response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def _find(ctx: ServerContext, response_id: str) -> Stored:
    stored = ctx.responses.get(response_id)
    if stored is None:
        raise APIError(
            f"No response found with id {response_id[:100]!r}.",
            code="response_not_found",
            param="response_id",
            status=404,
        )
    return stored
