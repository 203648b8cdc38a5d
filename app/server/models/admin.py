"""Loading and unloading models over HTTP, in llama-server's router shape (`GET /models` lists the library
with each model's status, `POST /models/load` and `POST /models/unload` take `{"model": id}` and answer
`{"success": true}` once done) and LM Studio's (`POST /api/v1/models/load` with its load options,
`POST /api/v1/models/unload` with the `instance_id` it answered). The same front door (Host, key, body caps)
as every route."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from app.core.engines.base import LoadSpec
from app.core.library.store import LocalModel
from app.core.runtime.job_host import Resident
from app.core.runtime.jobs import JobHandle, ModelNotFound, UnloadJob, keep_for
from app.server.context import ServerContext, hearth
from app.server.errors import APIError, from_failure
from app.server.request_fields import MAX_TTL_S

router = APIRouter()


class ModelName(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=1000)


class RouterLoad(ModelName):
    """llama-server's load body, with how long the model stays when idle (LM Studio's `ttl`, seconds; -1:
    for ever) and Hearth's pin (never unloaded to make room for another)."""

    ttl: int | None = Field(default=None, ge=-1, le=MAX_TTL_S)
    pin: bool | None = None


class LmStudioLoad(ModelName):
    """LM Studio's load options; `num_experts` and `offload_kv_cache_to_gpu` are taken and not applied
    (the planner decides the offload, and llama-cpp-python sets no expert count)."""

    context_length: int | None = Field(default=None, ge=16, le=1 << 22)
    eval_batch_size: int | None = Field(default=None, ge=1, le=1 << 16)
    flash_attention: bool | None = None
    num_experts: int | None = Field(default=None, ge=1, le=1024)
    offload_kv_cache_to_gpu: bool | None = None
    echo_load_config: bool = False


class InstanceId(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str = Field(min_length=1, max_length=1000)


def _loaded(ctx: ServerContext, model: LocalModel) -> bool:
    resident = ctx.resident(model)
    return resident is not None and resident.state.model is not None


def _find(ctx: ServerContext, name: str) -> LocalModel:
    if ctx.resolver is None:
        raise APIError(
            "this server runs only the model it was started with", code="unsupported", param="model", status=400
        )
    try:
        return ctx.resolver.find(name)
    except ModelNotFound as exc:
        raise APIError(str(exc), code="model_not_found", param="model", status=404) from exc


async def load_library_model(
    ctx: ServerContext, name: str, ttl: int | None = None, pin: bool | None = None, **overrides: Any
) -> tuple[LocalModel, LoadSpec]:
    """Load `name` with `overrides` (LoadSpec fields; None: as they are) over the load it has now (or its
    planned one), unless it is loaded so already; beside the loaded models, those least recently used
    unloaded first if it needs their room. A context asked is at most the model's trained length. The load
    is planned like any other before the loaded model is let go: one that does not fit is refused with the
    planner's reasons (does_not_fit, a 400) and the model stays as it was. `ttl` (seconds, -1: for ever) and
    `pin` apply to it either way."""
    model = await asyncio.to_thread(_find, ctx, name)
    resolver = ctx.resolver
    assert resolver is not None
    job = await asyncio.to_thread(resolver, model.name)
    asked = {k: v for k, v in overrides.items() if v is not None}
    if "n_ctx" in asked:
        asked["n_ctx"] = (await asyncio.to_thread(resolver.sized, model, asked["n_ctx"])).n_ctx
    resident = ctx.resident(model)
    loaded = resident.state.load if resident is not None and resident.state.model is not None else None
    spec = (loaded or job.spec).model_copy(update=asked)
    ttl_s = keep_for(ttl)
    if loaded is None or spec != loaded:
        grow_to = 0 if "n_ctx" in asked else job.grow_to  # a context asked for is the context
        await _finish(
            ctx.host.submit(dataclasses.replace(job, spec=spec, ttl_s=ttl_s, pin=pin, focus=False, grow_to=grow_to))
        )
    elif ttl_s is not None or pin is not None:
        ctx.host.keep(model.name, ttl_s=ttl_s, pin=pin)
    return model, spec


async def _finish(handle: JobHandle) -> dict[str, Any]:
    await asyncio.to_thread(handle.wait)
    if handle.error is not None:
        raise from_failure(handle.error, handle.error_code or "engine_error", param="model")
    return {"success": True}


@router.get("/models")
async def router_models(request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    models = await asyncio.to_thread(lambda: ctx.library.list(status="ready") if ctx.library is not None else [])
    residents = ctx.host.residents()
    data = [
        {
            "id": m.name,
            "object": "model",
            "owned_by": "hearth",
            "created": int(m.added_at),
            "status": _status(ctx.resident(m, residents)),
        }
        for m in models
    ]
    return {"object": "list", "data": data}


def _status(resident: Resident | None) -> dict[str, Any]:
    """llama-server's status value ("loaded", "loading", "unloaded"), and for a loaded model what it holds and
    how long it stays: memory as planned, its idle time-to-live and what is left of it (null: no limit, or
    not counting while busy), pinned."""
    if resident is None:
        return {"value": "unloaded"}
    if resident.state.model is None:
        return {"value": "loading"}
    return {
        "value": "loaded",
        "memory_bytes": resident.memory_bytes,
        "context_length": resident.state.model.n_ctx,
        "ttl_s": resident.ttl_s,
        "idle_left_s": None if resident.idle_left_s is None else round(resident.idle_left_s, 1),
        "pinned": resident.pinned,
        "busy": resident.state.status == "generating",
    }


@router.post("/models/load")
async def load_model(body: RouterLoad, request: Request) -> dict[str, Any]:
    """Answers when the model is ready; a model already loaded answers at once."""
    await load_library_model(hearth(request), body.model, ttl=body.ttl, pin=body.pin)
    return {"success": True}


async def unload_library_model(ctx: ServerContext, model: LocalModel) -> None:
    """Unload `model` once its jobs in hand are done; a pinned model stays and the request gets a 409
    (model_pinned) saying how to unpin it: no API request unloads a model the user pinned."""
    await _finish(ctx.host.submit(UnloadJob(model=model.name)))


@router.post("/models/unload")
async def unload_model(body: ModelName, request: Request) -> dict[str, Any]:
    ctx = hearth(request)
    model = await asyncio.to_thread(_find, ctx, body.model)
    if not _loaded(ctx, model):
        raise APIError(f"{model.name} is not loaded", code="model_not_loaded", param="model", status=400)
    await unload_library_model(ctx, model)
    return {"success": True}


@router.post("/api/v1/models/load")
async def lmstudio_load(body: LmStudioLoad, request: Request) -> dict[str, Any]:
    """Loads the model with LM Studio's options over the planned ones, beside the loaded models; the instance
    id is the model's library name, as `POST /api/v1/models/unload` takes it back."""
    ctx = hearth(request)
    began = time.monotonic()
    model, spec = await load_library_model(
        ctx, body.model, n_ctx=body.context_length, n_batch=body.eval_batch_size, flash_attn=body.flash_attention
    )
    answer: dict[str, Any] = {
        "type": "embedding" if spec.embedding else "llm",  # LM Studio's two kinds; a reranker loads as the second
        "instance_id": model.name,
        "load_time_seconds": round(time.monotonic() - began, 3),
        "status": "loaded",
    }
    if body.echo_load_config:
        resident = ctx.resident(model)
        loaded = resident.state.model if resident is not None else None
        answer["load_config"] = {
            "context_length": loaded.n_ctx if loaded is not None else spec.n_ctx,
            "eval_batch_size": spec.n_batch,
            "flash_attention": spec.flash_attn,
        }
    return answer


@router.post("/api/v1/models/unload")
async def lmstudio_unload(body: InstanceId, request: Request) -> dict[str, Any]:
    await unload_model(ModelName(model=body.instance_id), request)
    return {"instance_id": body.instance_id}
