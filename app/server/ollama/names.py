"""Names and times as Ollama's clients read them. A model is `name:tag`, with `:latest` when no tag was
typed: Hearth's library names have no tags, so each is listed as `NAME:latest`, and a request may name a
model with or without that tag (or by its library id, as on the other routes). Times are RFC 3339 in UTC."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from app.core.library.store import LocalModel
from app.server.context import LATEST_TAG, ServerContext
from app.server.errors import APIError


def listed_name(model_id: str) -> str:
    """How /api/tags and /api/ps name a library model."""
    return model_id if ":" in model_id else model_id + LATEST_TAG


def model_name(ctx: ServerContext, name: str) -> str:
    """The library name a request's `model` stands for (with or without `:latest`, or as `hf.co/…`); an
    unknown name is passed on as it is, so the job answers 404 naming what was asked."""
    return ctx.library_name(name) or name


def library_model(ctx: ServerContext, name: str) -> LocalModel:
    """The ready library model a request names; 404 in Ollama's words otherwise. Blocking (the library)."""
    model = ctx.library.find(model_name(ctx, name)) if ctx.library is not None else None
    if model is None or not model.ready:
        raise APIError(f"model '{name[:200]}' not found", code="model_not_found", param="model", status=404)
    return model


def rfc3339(epoch: float | None = None) -> str:
    """`epoch` (default: now) with microseconds, as Ollama writes its times."""
    return datetime.fromtimestamp(time.time() if epoch is None else epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
