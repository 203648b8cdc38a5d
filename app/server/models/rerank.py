"""`POST /v1/rerank` (and llama-server's aliases `/rerank`, `/v1/reranking`, `/reranking`): a reranker model
scores each document for its relevance to a query, answered in the shape Jina and Cohere clients read
(llama-server's): results sorted by score, most relevant first, each with its document's index."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from app.core.engines.base import Rankings
from app.core.engines.errors import EngineError
from app.core.engines.inputs.rerank_limits import MAX_RERANK_DOCUMENTS, check_rerank_texts
from app.core.runtime.jobs import RerankJob
from app.server.context import hearth
from app.server.errors import from_failure
from app.server.job_stream import JobStream
from app.server.replies import CLIENT_GONE
from app.server.request_fields import RequestBase

router = APIRouter()
PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")


class RerankDocument(BaseModel):
    """A document as Jina and Cohere's v1 API also take it: an object with its text."""

    model_config = ConfigDict(extra="forbid")

    text: str


class RerankRequest(RequestBase):
    # Strict, unlike the OpenAI bodies: a field this route does not implement (Cohere's rank_fields,
    # max_tokens_per_doc) would change the answer, so it is refused rather than silently ignored.
    model_config = ConfigDict(extra="forbid")
    max_text_chars: ClassVar[int | None] = None  # many documents, each its own input (rerank_limits caps them)

    model: str | None = Field(default=None, max_length=512)
    query: str
    documents: Annotated[list[str | RerankDocument], Field(min_length=1, max_length=MAX_RERANK_DOCUMENTS)]
    top_n: int | None = Field(default=None, ge=1, description="the most relevant documents to return; all if unset")
    return_documents: bool = False

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


def ranked(scores: list[float], texts: list[str], top_n: int | None, with_documents: bool) -> list[dict[str, Any]]:
    """The results, most relevant first (ties keep the documents' order), cut to `top_n`."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: top_n or len(scores)]
    results: list[dict[str, Any]] = []
    for i in order:
        result: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if with_documents:
            result["document"] = {"text": texts[i]}
        results.append(result)
    return results


async def rerank(body: RerankRequest, request: Request) -> Response:
    ctx = hearth(request)
    texts = body.texts()
    try:  # the bounds that need no tokenizer, answered before the job queues; the engine checks again
        check_rerank_texts(body.query, texts)
    except EngineError as exc:
        raise from_failure(str(exc), exc.code, param=exc.details.get("param")) from exc
    await ctx.check_role(body.model, ("rerank",), "/v1/rerank")
    host, model_name = ctx.route(body.model)
    stream = JobStream(host, RerankJob(body.query, texts, model=model_name), request, ctx.streams)
    done = await stream.result()
    if done is None:
        return Response(status_code=CLIENT_GONE)
    result: Rankings = done.result
    model = body.model or (ctx.model_id(ctx.host.state.model) if ctx.host.state.model else "")
    tokens = result.prompt_tokens
    request.state.model = model
    request.state.usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
    return JSONResponse(
        {
            "id": f"rerank-{uuid.uuid4().hex}",
            "object": "list",
            "model": model,
            "results": ranked(result.scores, texts, body.top_n, body.return_documents),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


for _path in PATHS:
    router.add_api_route(_path, rerank, methods=["POST"], name=f"rerank {_path}")
