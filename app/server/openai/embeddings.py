"""`POST /v1/embeddings`: text, or OpenAI token ids read back into text (token_ids.py), embedded by the
job every embeddings route shares (embeddings.py); vectors as floats or base64."""

from __future__ import annotations

import asyncio
import base64
import struct

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.engines.inputs.embed_limits import MAX_EMBED_TOKENS
from app.server.context import ServerContext, hearth
from app.server.embeddings import embed_texts, shortened
from app.server.errors import APIError
from app.server.openai.schemas import EmbeddingRequest
from app.server.openai.token_ids import TokenIdsUnreadable, texts_of
from app.server.replies import CLIENT_GONE

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> Response:
    ctx = hearth(request)
    # The schema has already made `input` a string, or a non-empty list of strings or of token ids.
    texts = body.texts()
    if texts is None:
        texts = await read_token_ids(ctx, body.token_ids())
    result = await embed_texts(ctx, request, texts, body.model, body.ttl_s(), "/v1/embeddings")
    if result is None:
        return Response(status_code=CLIENT_GONE)
    vectors = shortened(result.vectors, body.dimensions)
    data = [
        {"object": "embedding", "index": i, "embedding": _b64(v) if body.encoding_format == "base64" else v}
        for i, v in enumerate(vectors)
    ]
    model = body.model or (ctx.model_id(ctx.host.state.model) if ctx.host.state.model else "")
    tokens = result.prompt_tokens
    request.state.model = model
    request.state.usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
    return JSONResponse(
        {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    )


async def read_token_ids(ctx: ServerContext, ids: list[list[int]]) -> list[str]:
    """OpenAI token ids as the texts they encode (token_ids.py says why cl100k_base); a 400 naming
    `input` when they cannot be read. The file is read off the event loop."""
    total = sum(len(one) for one in ids)
    if total > MAX_EMBED_TOKENS:
        raise APIError(
            f"input holds {total:,} token ids, over the {MAX_EMBED_TOKENS:,} one request takes",
            "request_too_large",
            code="request_too_large",
            param="input",
            status=413,
        )
    try:
        return await asyncio.to_thread(texts_of, ctx.token_tables, ids)
    except TokenIdsUnreadable as exc:
        raise APIError(str(exc), code="token_ids_unreadable", param="input") from exc


def _b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
