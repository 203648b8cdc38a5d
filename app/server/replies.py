"""What the generation routes of every dialect share: mapping sampling fields onto the engine's, ids, usage,
and the waits of a generation (for its start, then for its whole reply)."""

from __future__ import annotations

import functools
import secrets
import string
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

from app import __version__
from app.core.engines.base import Capabilities, Chunk, GenerateRequest, GenerationStats, ModelInfo, SamplingParams
from app.core.engines.inputs.images import has_images
from app.core.runtime.jobs import GenerateJob, GenerateResult, JobFailed, Started
from app.server import reply_stream
from app.server.context import ServerContext
from app.server.errors import from_failure
from app.server.job_stream import JobStream, failure_error
from app.server.web_images import fetch_web_images, with_fetched

# What a client that sets nothing gets: llama-server's defaults, which local-model clients expect.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
SYSTEM_FINGERPRINT = f"fp_hearth_{__version__}"
_ALPHABET = string.ascii_letters + string.digits
UINT32 = 0xFFFFFFFF
CLIENT_GONE = 499  # what the request log records for a client that left (nginx's convention)


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(24))


def now() -> int:
    return int(time.time())


def route_sampling(
    temperature: float | None, top_p: float | None, max_tokens: int | None, **extra: Any
) -> SamplingParams:
    """The engine's sampling for any route: llama-server's temperature and top_p when a client sets none
    (top_p 0 means "the top token only"); each of `extra` only when the request gave it."""
    values: dict[str, Any] = {
        "temperature": DEFAULT_TEMPERATURE if temperature is None else temperature,
        "top_p": DEFAULT_TOP_P if top_p is None else max(top_p, 1e-6),
        "max_tokens": max_tokens,
    }
    values.update({name: value for name, value in extra.items() if value is not None})
    return SamplingParams(**values)


def usage(stats: GenerationStats | None) -> dict[str, Any]:
    prompt = stats.prompt_tokens if stats else 0
    completion = stats.generated_tokens if stats else 0
    cached = max(0, prompt - stats.prompt_tokens_evaluated) if stats else 0
    drafted = stats.draft_tokens if stats else 0
    accepted = stats.draft_accepted if stats else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        # OpenAI's fields for predicted tokens kept and thrown away: here, speculative decoding's drafts.
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": drafted - accepted,
        },
    }


def timings(stats: GenerationStats | None) -> dict[str, Any]:
    """llama-server's `timings` object on the last chunk and on whole replies (clients such as llama.cpp's
    web UI and bench scripts read it; OpenAI clients ignore it): the engine's own measure of the reply."""
    if stats is None:
        return {}
    evaluated, predicted = stats.prompt_tokens_evaluated, stats.generated_tokens
    prompt_ms = evaluated / stats.prompt_tok_s * 1000 if stats.prompt_tok_s > 0 else 0.0
    predicted_ms = (predicted - 1) / stats.decode_tok_s * 1000 if stats.decode_tok_s > 0 and predicted > 1 else 0.0
    return {
        "cache_n": max(0, stats.prompt_tokens - evaluated),
        "prompt_n": evaluated,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_second": round(stats.prompt_tok_s, 3),
        "predicted_n": predicted,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_second": round(stats.decode_tok_s, 3),
        "ttft_ms": round(stats.time_to_first_token_s * 1000, 3),
        # llama-server's names for speculative decoding's drafts (present only when something was drafted).
        **({"draft_n": stats.draft_tokens, "draft_n_accepted": stats.draft_accepted} if stats.draft_tokens else {}),
    }


def finish_reason(final: Chunk) -> str:
    return "length" if final.finish_reason == "length" else "stop"


async def begin(
    ctx: ServerContext,
    request: Request,
    generate: GenerateRequest,
    name: str | None,
    prepare: Callable[[ModelInfo, Capabilities], GenerateRequest] | None = None,
    ttl_s: float | None = None,
) -> tuple[JobStream, str] | None:
    """Queue a generation for the model a request `name`s and wait for it to start: its stream and the
    model id the reply names (also left for the request log); None when the client left meanwhile.
    `ttl_s`: how long the model stays loaded when idle after it (the request's ttl or keep_alive).
    A failure before any output (no such model, a prompt over the context) raises as its APIError."""
    await ctx.check_role(name, ("chat",), "generating text")
    if has_images(generate.messages):
        await ctx.check_vision(name)
        if fetched := await fetch_web_images(generate, ctx.web_images):
            # Whatever request the job runs (a shape's prepare builds its own) gets the fetched bytes.
            generate = with_fetched(generate, fetched)
            if prepare is not None:
                prepare = functools.partial(_prepared_with, prepare, fetched)
    host, model_name = ctx.route(name)
    job = GenerateJob(generate, source="api", model=model_name, prepare=prepare, ttl_s=ttl_s)
    stream = JobStream(host, job, request, ctx.streams)
    first = await started(stream)
    if first is None:
        return None
    model = name or ctx.model_id(first.model)
    request.state.model = model
    return stream, model


def _prepared_with(
    prepare: Callable[[ModelInfo, Capabilities], GenerateRequest],
    fetched: dict[str, bytes],
    info: ModelInfo,
    capabilities: Capabilities,
) -> GenerateRequest:
    """Host thread: a job's `prepare`, with the images a request named by URL in place."""
    return with_fetched(prepare(info, capabilities), fetched)


async def started(stream: JobStream) -> Started | None:
    """The job's first event, while the status is still ours to choose: Started, or None when the client
    left; a failure before any output raises as its APIError. Returns once the next event has arrived too
    (the first token, mostly), or after reply_stream.response_hold_s(): the response starts then, not while
    the engine reads the prompt (a long prompt still gets its headers and keep-alives on time)."""
    first = await stream.next()
    if first is None:
        return None
    if isinstance(first, JobFailed):
        raise failure_error(first)
    assert isinstance(first, Started)
    await stream.settle(reply_stream.response_hold_s())
    return first


async def whole_reply(stream: JobStream, request: Request, chunks: list[Chunk] | None = None) -> GenerateResult | None:
    """The finished generation (None when the client left), its usage left for the request log; an engine
    failure raises as a 500. `chunks` collects the chunks for a caller that needs more than the text."""
    done = await stream.result(chunks)
    if done is None:
        return None
    result = done.result
    assert isinstance(result, GenerateResult)
    if result.final.finish_reason == "error":
        raise from_failure(result.final.error or "the generation failed", result.final.error_code or "engine_error")
    request.state.usage = usage(result.final.stats)
    return result
