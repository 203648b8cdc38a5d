"""`GET /v1/models`, `GET /v1/models/{id}` and `GET /health`.

A model lists what OpenAI lists (id, object, created, owned_by) and what a local client needs to pick
one: format, quant, whether it is loaded, the context it runs (or would run) with, and capabilities."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request

from app import __version__
from app.core.engines.registry import abilities
from app.core.engines.remote import RemoteEntry
from app.core.formats import REMOTE
from app.core.library.projectors import sees_images
from app.core.library.store import LocalModel
from app.core.runtime.job_host import Resident
from app.core.runtime.jobs import ModelNotFound
from app.server.context import ServerContext, hearth
from app.server.errors import APIError

router = APIRouter()
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")


def describe(ctx: ServerContext, model: LocalModel, residents: list[Resident] | None = None) -> dict[str, Any]:
    resident = ctx.resident(model, residents)
    loaded = resident is not None and resident.state.model is not None
    if resident is not None and resident.state.model is not None:
        context = resident.state.context_limit
    else:
        try:
            context = ctx.resolver.context_length(model) if ctx.resolver is not None else 0
        except ModelNotFound:
            context = 0
    role = ctx.resolver.role(model) if ctx.resolver is not None else "chat"
    owner = model.repo_id.split("/")[0] if model.repo_id else "local"
    return {
        "id": model.name,
        "object": "model",
        "created": int(model.added_at),
        "owned_by": owner,
        # Anthropic's model fields, so its clients list models from the same route.
        "type": "model",
        "display_name": model.name,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(model.added_at)),
        "format": model.format,
        "quant": model.quant,
        "loaded": loaded,
        # The one context every route gets: loaded, what it runs with or grows to for a request that needs it;
        # else what a request would load it with (and grow it to).
        "context_length": context,
        "context_by_route": dict.fromkeys(ROUTES, context),
        # What the file is for (models.roles): a chat model, an embedding model or a reranker.
        "role": role,
        "capabilities": capabilities(model.format, role, vision=sees_images(model)),
    }


def capabilities(fmt: str, role: str, *, vision: bool = False) -> dict[str, bool]:
    """The routes a model of `fmt` serves in its role. A chat model: tools in its own format when its template
    has one, else Hearth's prompt fallback; forced calls and JSON schemas need grammars, which the GGUF engine
    has; embeddings from a second context on its weights; images where it has a projector (`vision`). An
    embedding model embeds; a reranker ranks."""
    chat = role == "chat"
    grammar = chat and abilities(fmt).grammar
    return {
        "chat": chat,
        "completion": chat,
        "tools": chat,
        "forced_tool_calls": grammar,
        "json_schema": grammar,
        "embeddings": role == "embedding" or (chat and abilities(fmt).embeddings),
        "rerank": role == "rerank",
        "vision": chat and vision,
    }


def describe_remote(entry: RemoteEntry) -> dict[str, Any]:
    """An exposed remote model: OpenAI's fields, the context the remote said, and where it runs."""
    remote, context = entry.remote, entry.model.context_length or 0
    return {
        "id": entry.id,
        "object": "model",
        "created": int(remote.probed_at),
        "owned_by": remote.name,
        "type": "model",
        "display_name": entry.id,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(remote.probed_at)),
        "format": REMOTE,
        "quant": None,
        "loaded": False,
        "context_length": context,
        "context_by_route": dict.fromkeys(ROUTES, context),
        "remote": {"name": remote.name, "kind": remote.kind, "model": entry.model.id, "reachable": remote.reachable},
        "role": "chat",
        # The remote parses tool calls and applies JSON schemas itself; embeddings are not forwarded (yet).
        "capabilities": {
            "chat": True,
            "completion": True,
            "tools": True,
            "forced_tool_calls": False,
            "json_schema": True,
            "embeddings": False,
            "rerank": False,
        },
    }


def _remote_models(ctx: ServerContext) -> list[dict[str, Any]]:
    if ctx.remotes is None:
        return []
    return [describe_remote(e) for e in ctx.remotes.exposed() if not ctx.in_library(e.id)]


def _ready_models(ctx: ServerContext) -> list[LocalModel]:
    return ctx.library.list(status="ready") if ctx.library is not None else []


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    # Planning a model reads its header: off the event loop, so a long list never stalls a stream.
    residents = ctx.host.residents()
    data = await asyncio.to_thread(
        lambda: [describe(ctx, m, residents) for m in _ready_models(ctx)] + _remote_models(ctx)
    )
    ids = [m["id"] for m in data]
    # OpenAI's list, with Anthropic's paging fields (one page: a library is small).
    return {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": ids[0] if ids else None,
        "last_id": ids[-1] if ids else None,
    }


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    remote = ctx.remotes.find(model_id) if ctx.remotes is not None and not ctx.in_library(model_id) else None
    if remote is not None and remote.remote.expose_locally:
        return describe_remote(remote)
    if ctx.resolver is None:
        raise APIError(
            f"the model {model_id!r} does not exist", "invalid_request_error", code="model_not_found", status=404
        )
    resolver = ctx.resolver
    try:
        model = await asyncio.to_thread(resolver.find, model_id)
    except ModelNotFound as exc:
        raise APIError(str(exc), "invalid_request_error", code="model_not_found", param="model", status=404) from exc
    return await asyncio.to_thread(describe, ctx, model)


@router.get("/health")
async def health() -> dict[str, Any]:
    """Open without a key (security.OPEN_PATHS), so it says only that the server is up."""
    return {"status": "ok", "version": __version__}
