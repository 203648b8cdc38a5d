"""What every embeddings route shares (OpenAI's `/v1/embeddings`, Ollama's `/api/embed` and
`/api/embeddings`): the embedding job with its bounds checked first, and shortening the vectors."""

from __future__ import annotations

import math

from fastapi import Request

from app.core.engines.base import Embeddings
from app.core.engines.errors import EngineError
from app.core.engines.inputs.embed_limits import check_embed_texts
from app.core.runtime.jobs import EmbedJob
from app.server.context import ServerContext
from app.server.errors import APIError, from_failure
from app.server.job_stream import JobStream


async def embed_texts(
    ctx: ServerContext, request: Request, texts: list[str], name: str | None, ttl_s: float | None, route: str
) -> Embeddings | None:
    """The vectors of `texts` from the model `name`s (None: the client left). Any embeddings route's job:
    the bounds that need no tokenizer are answered before it queues (T40; the engine checks again), and a
    model of the wrong role is refused before anything loads."""
    try:
        check_embed_texts(texts)
    except EngineError as exc:
        raise from_failure(str(exc), exc.code, param=exc.details.get("param")) from exc
    await ctx.check_role(name, ("chat", "embedding"), route)
    host, model_name = ctx.route(name)
    stream = JobStream(host, EmbedJob(texts, model=model_name, ttl_s=ttl_s), request, ctx.streams)
    done = await stream.result()
    return None if done is None else done.result


def shortened(vectors: list[list[float]], dimensions: int | None, param: str = "dimensions") -> list[list[float]]:
    """The first `dimensions` values of each vector, scaled back to unit length (how Matryoshka-trained
    models, and OpenAI's `dimensions`, shorten an embedding); more than the model gives is a 400."""
    if dimensions is None or not vectors or dimensions == len(vectors[0]):
        return vectors
    if dimensions > len(vectors[0]):
        raise APIError(f"{param} is {dimensions}, but this model's embeddings have {len(vectors[0])}", param=param)
    out = []
    for vector in vectors:
        head = vector[:dimensions]
        norm = math.sqrt(sum(v * v for v in head))
        out.append([v / norm for v in head] if norm > 0 else head)
    return out
