"""`POST /api/chat` and `POST /api/generate`: Ollama's generation routes over the same engine jobs, tool-call
parsers and reasoning split as the OpenAI routes.

Both stream NDJSON unless `stream` is false: one object per piece of text (`message.content` or `response`,
`thinking` when asked for), a tool call as one object once its arguments are whole (Ollama's shape: the
arguments an object), and a last object with `done: true`, `done_reason` and the durations in nanoseconds.
A prompt over the context, or a model that cannot run the request, is an error before any byte; a failure
after the first line is a last line with `error`, as Ollama does."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.core.engines.base import ChatMessage, Chunk, GenerateRequest, ImageInput, SamplingParams
from app.core.runtime.jobs import KEEP_FOREVER
from app.core.tools import ParsedOutput, ReasoningDelta, TextDelta, ToolCall, ToolCallArgs, ToolCallStart
from app.server.chat_output import ChatShape, checked_schema
from app.server.context import ServerContext, hearth
from app.server.errors import APIError
from app.server.image_input import image_bytes
from app.server.models.admin import load_library_model, unload_library_model
from app.server.ollama.names import library_model, model_name, rfc3339
from app.server.ollama.schemas import GenerationFields, OllamaChatRequest, OllamaGenerateRequest, OllamaMessage
from app.server.replies import CLIENT_GONE, begin, route_sampling, usage, whole_reply
from app.server.reply_stream import Broken, Finished, Ping, reply_steps

router = APIRouter()
NDJSON = "application/x-ndjson"
NS = 1_000_000_000


def _images(images: list[str] | None, where: str) -> list[ImageInput] | None:
    """Ollama's images (base64, or a data: URI), placed before the message's text as Ollama places them."""
    if not images:
        return None
    return [ImageInput(data=image_bytes(b64, f"{where}.{k}", bare_base64=True)) for k, b64 in enumerate(images)]


def to_messages(messages: list[OllamaMessage]) -> list[ChatMessage]:
    """The engine's conversation. Ollama's tool results name no call id: each is matched to the latest
    assistant's calls by `tool_name`, else in order."""
    out: list[ChatMessage] = []
    pending: list[ToolCall] = []
    for i, m in enumerate(messages):
        images = _images(m.images, f"messages.{i}.images")
        calls = None
        if m.role == "assistant" and m.tool_calls:
            calls = [
                ToolCall(id=c.id or f"call_{i}_{j}", name=c.function.name, arguments=_arguments(c.function.arguments))
                for j, c in enumerate(m.tool_calls)
            ]
            pending = list(calls)
        call_id = None
        if m.role == "tool":
            match = next((c for c in pending if c.name == m.tool_name), None) if m.tool_name else None
            match = match or (pending[0] if pending else None)
            if match is not None:
                pending.remove(match)
            call_id = m.tool_call_id or (match.id if match is not None else f"call_{i}")
        out.append(
            ChatMessage(
                role=m.role,
                content=m.content or "",
                name=m.tool_name if m.role == "tool" else None,
                tool_calls=calls,
                tool_call_id=call_id,
                images=images,
            )
        )
    return out


def _arguments(value: dict[str, Any] | str) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _sampling(body: GenerationFields) -> SamplingParams:
    o = body.options
    return route_sampling(
        o.temperature,
        o.top_p,
        o.max_tokens(),
        top_k=o.top_k,
        min_p=o.min_p,
        repeat_penalty=o.repeat_penalty,
        presence_penalty=o.presence_penalty,
        frequency_penalty=o.frequency_penalty,
        seed=None if o.seed is None else o.seed & 0xFFFFFFFF,
        stop=[s for s in o.stop or [] if s],
    )


def _schema(body: GenerationFields) -> Any:
    if body.format == "json":
        return {"type": "object"}
    if isinstance(body.format, dict):
        return checked_schema(body.format, "format")
    return None


def chat_shape(body: OllamaChatRequest) -> ChatShape:
    request = GenerateRequest(
        messages=to_messages(body.messages),
        sampling=_sampling(body),
        json_schema=_schema(body),
        schema_field="format",
    )
    tools = [t.model_dump() for t in body.tools] if body.tools else None
    return ChatShape(request, tools, (body.tool_choice or "auto") if tools else None, True)


def generate_shape(body: OllamaGenerateRequest) -> ChatShape:
    images = _images(body.images, "images")
    if images and (body.raw or body.suffix):
        raise APIError("images go through the model's template: not with raw or suffix", param="images")
    if body.template:
        raise APIError("template is not accepted: Hearth renders only the model's own chat template", param="template")
    if body.context:
        raise APIError("context is not supported: send the conversation to /api/chat instead", param="context")
    sampling, schema = _sampling(body), _schema(body)
    if body.suffix:  # fill in the middle: the prompt and suffix in the model's FIM tokens, `system` unused
        request = GenerateRequest(prompt=body.prompt, suffix=body.suffix, sampling=sampling, json_schema=schema)
        return ChatShape(request, None, None, True)
    if body.raw:  # the prompt as it is, no template
        return ChatShape(GenerateRequest(prompt=body.prompt, sampling=sampling, json_schema=schema), None, None, True)
    messages = [ChatMessage(role="system", content=body.system)] if body.system else []
    messages.append(ChatMessage(role="user", content=body.prompt, images=images))
    request = GenerateRequest(messages=messages, sampling=sampling, json_schema=schema, schema_field="format")
    return ChatShape(request, None, None, True)


class OllamaReply:
    """One reply's lines: the same model on each, text under `message` (chat) or `response` (generate)."""

    def __init__(self, model: str, chat: bool, think: bool | str | None, began: float, loaded: float) -> None:
        self.model, self.chat, self.began = model, chat, began
        self.load_ns = int((loaded - began) * NS)
        # Reasoning goes out as `thinking` unless the client said think: false (then it is left out).
        self.thinking = think is not False

    def line(self, content: str = "", thinking: str = "", calls: list[dict[str, Any]] | None = None) -> dict:
        out: dict[str, Any] = {"model": self.model, "created_at": rfc3339()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        else:
            out["response"] = content
            if thinking:
                out["thinking"] = thinking
        out["done"] = False
        return out

    def last(self, final: Chunk, body: dict[str, Any]) -> dict[str, Any]:
        """The closing fields on `body` (an empty line when streaming, the whole reply otherwise)."""
        stats = final.stats
        prompt_ns = eval_ns = 0
        if stats is not None and stats.prompt_tok_s > 0:
            prompt_ns = int(stats.prompt_tokens_evaluated / stats.prompt_tok_s * NS)
        if stats is not None and stats.decode_tok_s > 0:
            eval_ns = int(stats.generated_tokens / stats.decode_tok_s * NS)
        return {
            **body,
            "done": True,
            "done_reason": "length" if final.finish_reason == "length" else "stop",
            # Never less than its parts: eval_duration comes from the decode rate, which is timed between tokens
            # (n - 1 gaps), so for a short reply it can exceed the wall time this route measured.
            "total_duration": max(int((time.monotonic() - self.began) * NS), self.load_ns + prompt_ns + eval_ns),
            "load_duration": self.load_ns,
            "prompt_eval_count": stats.prompt_tokens if stats else 0,
            "prompt_eval_duration": prompt_ns,
            "eval_count": stats.generated_tokens if stats else 0,
            "eval_duration": eval_ns,
        }

    def whole(self, out: ParsedOutput, final: Chunk) -> dict[str, Any]:
        calls = [c for c in (ollama_call(c.name, c.arguments) for c in out.tool_calls) if c is not None]
        return self.last(final, self.line(out.content, out.reasoning if self.thinking else "", calls))

    async def stream(self, steps: AsyncIterator[Any]) -> AsyncIterator[bytes]:
        # Ollama sends a call whole, arguments parsed: each is held (its name, its argument pieces) until the
        # next call begins or the reply ends.
        calls: dict[int, list[str]] = {}
        names: dict[int, str] = {}

        def flush() -> list[bytes]:
            """The calls held so far, as lines (one whose arguments do not parse, cut off, is dropped)."""
            out = []
            for index in sorted(calls):
                call = ollama_call(names.pop(index), "".join(calls.pop(index)))
                if call is not None:
                    out.append(ndjson(self.line(calls=[call])))
            return out

        async for step in steps:
            if isinstance(step, Ping):
                continue  # NDJSON has no comment line; the relay still notices a client that left
            if isinstance(step, Broken):
                yield b"".join(flush()) + ndjson({"error": step.message})
                return
            if isinstance(step, Finished):
                # A call still open at the end goes out only if its arguments parse: one cut off by the token
                # limit is dropped (never shown as text), and the reason says "length".
                yield b"".join(flush()) + ndjson(self.last(step.final, self.line()))
                return
            out: list[bytes] = []
            for event in step:
                if isinstance(event, TextDelta) and event.text:
                    out.append(ndjson(self.line(event.text)))
                elif isinstance(event, ReasoningDelta) and event.text and self.thinking:
                    out.append(ndjson(self.line(thinking=event.text)))
                elif isinstance(event, ToolCallStart):
                    out += flush()
                    names[event.index], calls[event.index] = event.name, []
                elif isinstance(event, ToolCallArgs):
                    calls.setdefault(event.index, []).append(event.fragment)
            if out:
                yield b"".join(out)


def ollama_call(name: str, arguments: str) -> dict[str, Any] | None:
    """A call in Ollama's shape (arguments an object); None when its arguments are not a whole object."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return {"function": {"name": name, "arguments": parsed}}


def ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


async def preload(ctx: ServerContext, name: str, ttl_s: float | None) -> str:
    """What a request with nothing to generate does in Ollama: load the model (keep_alive 0: unload it);
    the done_reason that says which."""
    model = await asyncio.to_thread(library_model, ctx, name)
    if ttl_s == 0:
        if ctx.resident(model) is not None:
            await unload_library_model(ctx, model)
        return "unload"
    await load_library_model(ctx, model.name, ttl=None if ttl_s is None else _whole_seconds(ttl_s))
    return "load"


def _whole_seconds(ttl_s: float) -> int:
    return -1 if ttl_s == KEEP_FOREVER else math.ceil(ttl_s)


async def _fit_context(ctx: ServerContext, name: str, num_ctx: int | None) -> None:
    """Ollama's options.num_ctx: a model loaded (or planned) with less context is loaded again with that
    much, if it fits (else the planner's refusal is the answer); one with as much or more is used as it is."""
    if num_ctx is None or ctx.resolver is None or ctx.library is None:
        return
    model = await asyncio.to_thread(ctx.library.find, name)
    if model is None or not model.ready:
        return  # the job answers 404 naming it
    resident = ctx.resident(model)
    if resident is not None and resident.state.model is not None:
        current = resident.state.model.n_ctx
    else:
        current = await asyncio.to_thread(ctx.resolver.context_length, model)
    if num_ctx > current:
        await load_library_model(ctx, model.name, n_ctx=num_ctx)


async def _reply(body: GenerationFields, shape: ChatShape, request: Request, chat: bool) -> Response:
    ctx = hearth(request)
    began = time.monotonic()
    name = model_name(ctx, body.model)
    if _nothing_to_generate(body):
        reason = await preload(ctx, name, body.ttl_s())
        reply = OllamaReply(body.model, chat, body.think, began, time.monotonic())
        return JSONResponse({**reply.line(), "done": True, "done_reason": reason})
    await _fit_context(ctx, name, body.options.num_ctx)
    begun = await begin(ctx, request, shape.base, name, shape.prepare, body.ttl_s())
    if begun is None:
        return Response(status_code=CLIENT_GONE)
    stream, _ = begun
    reply = OllamaReply(body.model, chat, body.think, began, time.monotonic())
    if body.stream:
        return StreamingResponse(reply.stream(_logged(reply_steps(stream, shape), request)), media_type=NDJSON)
    result = await whole_reply(stream, request)
    if result is None:
        return Response(status_code=CLIENT_GONE)
    truncated = result.final.finish_reason == "length"
    return JSONResponse(reply.whole(shape.parse(result.text, truncated), result.final))


async def _logged(steps: AsyncIterator[Any], request: Request) -> AsyncIterator[Any]:
    """The steps, with the usage of a finished reply left for the request log."""
    async for step in steps:
        if isinstance(step, Finished):
            request.state.usage = usage(step.final.stats)
        yield step


def _nothing_to_generate(body: GenerationFields) -> bool:
    if isinstance(body, OllamaChatRequest):
        return not body.messages
    assert isinstance(body, OllamaGenerateRequest)
    return not body.prompt and not body.system and not body.raw


@router.post("/api/chat")
async def chat(body: OllamaChatRequest, request: Request) -> Response:
    return await _reply(body, chat_shape(body), request, chat=True)


@router.post("/api/generate")
async def generate(body: OllamaGenerateRequest, request: Request) -> Response:
    return await _reply(body, generate_shape(body), request, chat=False)
