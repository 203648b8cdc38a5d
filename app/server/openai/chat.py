"""`POST /v1/chat/completions`, as OpenAI answers it: one id, created and model for every chunk, the role
on the first delta, the finish reason on the last, the usage chunk after it with `choices: []`, then
`[DONE]`. The prompt is checked against the context before any byte is sent (400, never truncated).
Reasoning and tool calls are shaped by chat_output.py; logprobs (content tokens only) by logprobs.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.engines.base import ChatMessage, Chunk, GenerateRequest, Logprobs
from app.core.runtime.jobs import JobDone, JobFailed
from app.core.tools import ToolCall
from app.server.chat_output import ChatShape, checked_schema, delta, message
from app.server.context import hearth
from app.server.errors import APIError
from app.server.image_input import PartsText, image_bytes
from app.server.job_stream import JobStream, stream_failure
from app.server.openai.logprobs import Pending, chat_logprobs
from app.server.openai.schemas import ChatCompletionRequest, ChatMessageIn, ImagePart, TextPart
from app.server.replies import (
    CLIENT_GONE,
    SYSTEM_FINGERPRINT,
    begin,
    finish_reason,
    new_id,
    now,
    timings,
    usage,
    whole_reply,
)
from app.server.reply_stream import framed
from app.server.sse import DONE, sse, sse_response

router = APIRouter()


def to_message(i: int, m: ChatMessageIn) -> ChatMessage:
    if other := m.other_parts():
        raise APIError(
            f"Hearth reads text and images; message {i} has a {other[0][:40]} part",
            param=f"messages.{i}.content",
            code="unsupported_content",
        )
    role = "system" if m.role == "developer" else m.role
    calls = None
    if m.role == "assistant" and m.tool_calls:
        calls = [
            ToolCall(id=c.id or f"call_{i}_{j}", name=c.function.name, arguments=c.function.arguments or "{}")
            for j, c in enumerate(m.tool_calls)
        ]
    if m.role == "tool" and not m.tool_call_id:
        raise APIError(f"message {i} is a tool result without tool_call_id", param=f"messages.{i}.tool_call_id")
    parts = PartsText()
    for j, part in enumerate(m.content if isinstance(m.content, list) else [m.text()]):
        if isinstance(part, ImagePart):
            parts.image(image_bytes(part.url(), f"messages.{i}.content.{j}.image_url.url"))
        elif isinstance(part, (str, TextPart)):  # other parts were refused above
            parts.text(part if isinstance(part, str) else part.text)
    return parts.message(role, name=m.name, tool_calls=calls, tool_call_id=m.tool_call_id if m.role == "tool" else None)


def to_generate_request(body: ChatCompletionRequest) -> tuple[GenerateRequest, ChatShape]:
    """The engine's request for an OpenAI chat body, and how its reply is shaped; refuses what Hearth
    cannot honour, by name."""
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError("top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    messages = [to_message(i, m) for i, m in enumerate(body.messages)]
    schema = None
    if body.response_format is not None and body.response_format.type == "json_object":
        schema = {"type": "object"}
    elif body.response_format is not None and body.response_format.type == "json_schema":
        fmt = body.response_format.json_schema
        if fmt is None or not fmt.schema_:
            raise APIError("response_format json_schema needs a schema", param="response_format.json_schema")
        schema = checked_schema(fmt.schema_, "response_format.json_schema.schema")
    max_tokens = body.max_completion_tokens or body.max_tokens
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    request = GenerateRequest(
        messages=messages,
        sampling=body.engine_sampling(max_tokens, logprobs),
        json_schema=schema,
        schema_field="response_format.json_schema.schema",
    )
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    shape = ChatShape(
        request,
        tools,
        body.tool_choice,
        body.parallel_tool_calls is not False,
        inline_reasoning=body.reasoning_format == "inline",
    )
    return request, shape


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    ctx = hearth(request)
    generate, shape = to_generate_request(body)
    begun = await begin(ctx, request, generate, body.model, shape.prepare, body.ttl_s())
    if begun is None:
        return Response(status_code=CLIENT_GONE)
    stream, model = begun
    reply = Reply(new_id("chatcmpl-"), now(), model, shape)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(reply.stream(stream, include_usage, request))
    chunks: list[Chunk] | None = [] if reply.logprobs else None
    result = await whole_reply(stream, request, chunks)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    return JSONResponse(reply.completion(result.text, result.final, chunks))


def chat_finish(final: Chunk, called: bool) -> str:
    """The finish reason: the token limit first (a reply cut off while it made calls did not end on its
    own), then tool_calls, then stop."""
    if final.finish_reason == "length":
        return "length"
    return "tool_calls" if called else finish_reason(final)


class Reply:
    """One chat completion's envelope: the same id, created time and model on everything it sends."""

    def __init__(self, id_: str, created: int, model: str, shape: ChatShape) -> None:
        self.id, self.created, self.model, self.shape = id_, created, model, shape
        self.logprobs = shape.base.sampling.logprobs is not None

    def _base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def completion(self, text: str, final: Chunk, chunks: list[Chunk] | None = None) -> dict[str, Any]:
        out = self.shape.parse(text, truncated=final.finish_reason == "length")
        finish = chat_finish(final, bool(out.tool_calls))
        logprobs = None if chunks is None else chat_logprobs(self.content_logprobs(chunks))
        return {
            **self._base("chat.completion"),
            "choices": [{"index": 0, "message": message(out), "logprobs": logprobs, "finish_reason": finish}],
            "usage": usage(final.stats),
            "timings": timings(final.stats),
        }

    def content_logprobs(self, chunks: list[Chunk]) -> list[Logprobs]:
        """The records of a whole reply's content tokens, routed by a streaming parser as a stream's are."""
        parser, pending, out = self.shape.parser(), Pending(), []
        for chunk in chunks:
            pending.add(chunk.logprobs)
            if chunk.text:
                out += pending.route(parser.feed(chunk.text)) or []
        return out + (pending.route(parser.finish()) or [])

    def chunk(
        self,
        delta_: dict[str, Any],
        finish: str | None = None,
        *,
        with_usage: bool,
        logprobs: list[Logprobs] | None = None,
    ) -> dict[str, Any]:
        """`logprobs`: the records that go with this delta's content (None: the chunk has none)."""
        lp = None if logprobs is None else chat_logprobs(logprobs)
        out = {
            **self._base("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta_, "logprobs": lp, "finish_reason": finish}],
        }
        if with_usage:
            out["usage"] = None  # as OpenAI does on every chunk but the last when usage was asked for
        return out

    async def stream(self, stream: JobStream, include_usage: bool, request: Request) -> AsyncIterator[bytes]:
        """The SSE body. A client that leaves cancels the generator (and so the job), within one token."""
        parser = self.shape.parser()
        pending = Pending() if self.logprobs else None
        called = False  # a tool call went out: the finish reason is "tool_calls"
        enough = False  # all the calls the request allows are out: the rest of the generation is not needed

        def deltas(events: list) -> list[bytes]:
            nonlocal called
            records = pending.route(events) if pending is not None else None
            out = []
            for event in events:
                if (d := delta(event)) is not None:
                    called = called or "tool_calls" in d
                    lp = None
                    if records is not None and "content" in d:
                        lp, records = records, []  # the first content delta carries them
                    out.append(sse(self.chunk(d, with_usage=include_usage, logprobs=lp)))
            return out

        def on_chunk(chunk: Chunk) -> list[bytes]:
            nonlocal enough
            if pending is not None:
                pending.add(chunk.logprobs)
            if not chunk.text:
                return []
            out = deltas(parser.feed(chunk.text))
            if called and parser.limit_reached and not enough:
                enough = True
                stream.handle.cancel()
            return out

        def on_end(event: JobDone | JobFailed) -> list[bytes]:
            cut = isinstance(event, JobDone) and event.result.final.finish_reason == "length"
            out = deltas(parser.finish(truncated=cut))
            if enough and isinstance(event, JobDone) and event.result.final.finish_reason == "cancelled":
                failure = None  # we stopped it: every call it may make is out
            else:
                failure = stream_failure(event)
            if failure is not None:
                return [*out, sse(failure)]
            assert isinstance(event, JobDone)
            final = event.result.final
            request.state.usage = usage(final.stats)
            finish = chat_finish(final, called)
            last = self.chunk({}, finish, with_usage=include_usage)
            out.append(sse({**last, "timings": timings(final.stats)}))
            if include_usage:
                out.append(sse({**self._base("chat.completion.chunk"), "choices": [], "usage": usage(final.stats)}))
            return [*out, DONE]

        try:
            yield sse(self.chunk({"role": "assistant", "content": "", "refusal": None}, with_usage=include_usage))
            async for part in framed(stream, on_chunk, on_end):
                yield part
        finally:
            stream.cancel()  # a client that left before the first event
