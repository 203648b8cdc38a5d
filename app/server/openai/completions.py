"""`POST /v1/completions` (the legacy text API editors use for fill-in): a prompt string (or a list of
one), the same sampling and streaming rules as chat, no template applied, no echo. `logprobs: n` gives
OpenAI's parallel lists (logprobs.py says which text each token's record goes with)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.engines.base import Chunk, GenerateRequest
from app.core.runtime.jobs import JobDone, JobFailed
from app.server.context import hearth
from app.server.job_stream import JobStream, stream_failure
from app.server.openai.logprobs import Pending, TextOffsets
from app.server.openai.schemas import CompletionRequest
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


def to_generate_request(body: CompletionRequest) -> GenerateRequest:
    # The schema refuses what this route does not do: prompt lists of more than one, echo.
    prompt = body.prompt[0] if isinstance(body.prompt, list) else body.prompt
    suffix = body.suffix or None  # OpenAI's "" is no suffix
    return GenerateRequest(prompt=prompt, suffix=suffix, sampling=body.engine_sampling(body.max_tokens, body.logprobs))


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    ctx = hearth(request)
    generate = to_generate_request(body)
    begun = await begin(ctx, request, generate, body.model, ttl_s=body.ttl_s())
    if begun is None:
        return Response(status_code=CLIENT_GONE)
    stream, model = begun
    offsets = TextOffsets(generate.prompt or "") if body.logprobs is not None else None
    text = TextReply(new_id("cmpl-"), now(), model, offsets)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(text.stream(stream, include_usage, request))
    chunks: list[Chunk] | None = [] if offsets is not None else None
    result = await whole_reply(stream, request, chunks)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    return JSONResponse(text.completion(result.text, result.final, chunks))


class TextReply:
    def __init__(self, id_: str, created: int, model: str, offsets: TextOffsets | None = None) -> None:
        self.id, self.created, self.model = id_, created, model
        self.offsets = offsets  # None: no logprobs asked for

    def _body(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }

    def completion(self, text: str, final: Chunk, chunks: list[Chunk] | None = None) -> dict[str, Any]:
        logprobs = None
        if self.offsets is not None and chunks is not None:
            pending, records = Pending(), []
            for chunk in chunks:  # each record goes with the next text, as in a stream
                pending.add(chunk.logprobs)
                if chunk.text:
                    records += pending.take()
            logprobs = self.offsets.logprobs(records)
        choice = {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish_reason(final)}
        return {**self._body([choice]), "usage": usage(final.stats), "timings": timings(final.stats)}

    def stream(self, stream: JobStream, include_usage: bool, request: Request) -> AsyncIterator[bytes]:
        pending = Pending()

        def piece(text: str, finish: str | None = None) -> dict[str, Any]:
            logprobs = None
            if self.offsets is not None and finish is None:
                logprobs = self.offsets.logprobs(pending.take())
            out = self._body([{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}])
            if include_usage:
                out["usage"] = None
            return out

        def on_chunk(chunk: Chunk) -> list[bytes]:
            pending.add(chunk.logprobs)
            return [sse(piece(chunk.text))] if chunk.text else []

        def on_end(event: JobDone | JobFailed) -> list[bytes]:
            if (failure := stream_failure(event)) is not None:
                return [sse(failure)]
            assert isinstance(event, JobDone)
            final = event.result.final
            request.state.usage = usage(final.stats)
            out = [sse({**piece("", finish_reason(final)), "timings": timings(final.stats)})]
            if include_usage:
                out.append(sse({**self._body([]), "usage": usage(final.stats)}))
            return [*out, DONE]

        return framed(stream, on_chunk, on_end)
