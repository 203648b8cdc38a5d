"""`POST /api/embed` (a list of inputs, `dimensions`, `truncate`) and the older `POST /api/embeddings` (one
prompt), over the same embedding jobs as `/v1/embeddings`: an embedding model runs on its own, a chat model
embeds in a side context on its weights. An empty input only loads the model, as Ollama does."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.server.context import hearth
from app.server.embeddings import embed_texts, shortened
from app.server.ollama.chat import NS, preload
from app.server.ollama.names import model_name
from app.server.ollama.schemas import OllamaEmbeddingsRequest, OllamaEmbedRequest
from app.server.replies import CLIENT_GONE

router = APIRouter()


@router.post("/api/embed")
async def embed(body: OllamaEmbedRequest, request: Request) -> Response:
    ctx = hearth(request)
    began = time.monotonic()
    texts = body.texts()
    if not any(texts):  # "" or []: Ollama's way to load (or, with keep_alive 0, unload) a model
        await preload(ctx, body.model, body.ttl_s())
        return JSONResponse({"model": body.model, "embeddings": []})
    name = model_name(ctx, body.model)
    result = await embed_texts(ctx, request, texts, name, body.ttl_s(), "/api/embed")
    if result is None:
        return Response(status_code=CLIENT_GONE)
    vectors = shortened(result.vectors, body.dimensions)
    request.state.model = body.model
    request.state.usage = {"prompt_tokens": result.prompt_tokens, "completion_tokens": 0}
    answer: dict[str, Any] = {
        "model": body.model,
        "embeddings": vectors,
        "total_duration": int((time.monotonic() - began) * NS),
        "load_duration": 0,
        "prompt_eval_count": result.prompt_tokens,
    }
    return JSONResponse(answer)


@router.post("/api/embeddings")
async def embeddings(body: OllamaEmbeddingsRequest, request: Request) -> Response:
    ctx = hearth(request)
    if not body.prompt:
        await preload(ctx, body.model, body.ttl_s())
        return JSONResponse({"embedding": []})
    name = model_name(ctx, body.model)
    result = await embed_texts(ctx, request, [body.prompt], name, body.ttl_s(), "/api/embeddings")
    if result is None:
        return Response(status_code=CLIENT_GONE)
    request.state.model = body.model
    return JSONResponse({"embedding": result.vectors[0]})
