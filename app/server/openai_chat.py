"""`POST /v1/chat/completions`, as OpenAI answers it: one id, created and model for every chunk, the role
on the first delta, the finish reason on the last, the usage chunk after it with `choices: []`, then
`[DONE]`. The prompt is checked against the context before any byte is sent (400, never truncated)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.core.engines.base import ChatMessage, Chunk, GenerateRequest
from app.core.runtime.jobs import ChunkEvent, GenerateJob, GenerateResult, JobDone, JobFailed, Started
from app.server.context import hearth
from app.server.errors import APIError
from app.server.host_jobs import JobStream, failure_error, stream_failure
from app.server.openai_common import (
    DONE,
    PING,
    SSE_HEADERS,
    SYSTEM_FINGERPRINT,
    new_id,
    now,
    sampling,
    sse,
    usage,
)
from app.server.openai_schemas import ChatCompletionRequest

router = APIRouter()
PING_EVERY_S = 5.0
CLIENT_GONE = 499  # what the request log records for a client that left (nginx's convention)


def to_generate_request(body: ChatCompletionRequest) -> GenerateRequest:
    """The engine's request for an OpenAI chat body; refuses what Hearth cannot honour, by name."""
    if body.logprobs:
        raise APIError("logprobs are not supported yet", "not_supported_error", param="logprobs", code="unsupported")
    if body.tools:
        raise APIError("tool calling is not supported yet", "not_supported_error", param="tools", code="unsupported")
    messages = []
    for i, m in enumerate(body.messages):
        if other := m.other_parts():
            raise APIError(
                f"this model reads text only; message {i} has a {other[0]} part",
                param=f"messages.{i}.content",
                code="unsupported_content",
            )
        role = "system" if m.role == "developer" else m.role
        messages.append(ChatMessage(role=role, content=m.text(), name=m.name))
    schema = None
    if body.response_format is not None and body.response_format.type == "json_object":
        schema = {"type": "object"}
    elif body.response_format is not None and body.response_format.type == "json_schema":
        fmt = body.response_format.json_schema
        if fmt is None or not fmt.schema_:
            raise APIError("response_format json_schema needs a schema", param="response_format.json_schema")
        schema = fmt.schema_
    max_tokens = body.max_completion_tokens or body.max_tokens
    return GenerateRequest(messages=messages, sampling=sampling(body, max_tokens), json_schema=schema)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    ctx = hearth(request)
    job = GenerateJob(to_generate_request(body), source="api", model=ctx.job_model(body.model))
    stream = JobStream(ctx.host, job, request, ctx.streams)
    first = await stream.next()  # Started, or the failure: the status is still ours to choose
    if first is None:
        return Response(status_code=CLIENT_GONE)
    if isinstance(first, JobFailed):
        raise failure_error(first)
    assert isinstance(first, Started)
    model = body.model or ctx.model_id(first.model)
    request.state.model = model
    reply = Reply(new_id("chatcmpl-"), now(), model)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            reply.stream(stream, include_usage, request), media_type="text/event-stream", headers=SSE_HEADERS
        )
    done = await stream.result()
    if done is None:
        return Response(status_code=CLIENT_GONE)
    result = done.result
    assert isinstance(result, GenerateResult)
    final = result.final
    if final.finish_reason == "error":
        raise APIError(final.error or "the generation failed", "server_error", code="engine_error")
    request.state.usage = usage(final.stats)
    return JSONResponse(reply.completion(result.text, final))


class Reply:
    """One chat completion's envelope: the same id, created time and model on everything it sends."""

    def __init__(self, id_: str, created: int, model: str) -> None:
        self.id, self.created, self.model = id_, created, model

    def _base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def completion(self, text: str, final: Chunk) -> dict[str, Any]:
        message = {"role": "assistant", "content": text, "refusal": None}
        return {
            **self._base("chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(final)}],
            "usage": usage(final.stats),
        }

    def chunk(self, delta: dict[str, Any], finish: str | None = None, *, with_usage: bool) -> dict[str, Any]:
        out = {
            **self._base("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if with_usage:
            out["usage"] = None  # as OpenAI does on every chunk but the last when usage was asked for
        return out

    async def stream(self, stream: JobStream, include_usage: bool, request: Request) -> AsyncIterator[bytes]:
        """The SSE body. A client that leaves cancels the generator (and so the job), within one token."""
        try:
            yield sse(self.chunk({"role": "assistant", "content": "", "refusal": None}, with_usage=include_usage))
            async for event in stream.relay(PING_EVERY_S):
                if event is None:
                    yield PING
                elif isinstance(event, ChunkEvent):
                    if event.chunk.text:
                        yield sse(self.chunk({"content": event.chunk.text}, with_usage=include_usage))
                elif (failure := stream_failure(event)) is not None:
                    yield sse(failure)
                elif isinstance(event, JobDone):
                    final = event.result.final
                    request.state.usage = usage(final.stats)
                    yield sse(self.chunk({}, finish_reason(final), with_usage=include_usage))
                    if include_usage:
                        yield sse({**self._base("chat.completion.chunk"), "choices": [], "usage": usage(final.stats)})
                    yield DONE
        finally:
            stream.cancel()  # the client left, or we are done (then a no-op)


def finish_reason(final: Chunk) -> str:
    return "length" if final.finish_reason == "length" else "stop"
