"""Calls into the documents core from a route: run on a worker thread (they read SQLite and may embed a
query on the model pool), their refusals turned into API errors in OpenAI's shape. Shared by the vector
store routes and the Responses file_search tool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from app.core.documents.embedding import EmbeddingFailed
from app.core.documents.filters import FilterError
from app.core.documents.service import NoEmbeddingModel
from app.core.documents.store import DocumentsError
from app.core.documents.uploads import UploadTooLarge
from app.core.documents.vector_stores import NotFound
from app.server.errors import APIError, from_failure

P = ParamSpec("P")
R = TypeVar("R")


async def documents_call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except NotFound as exc:
        raise APIError(str(exc), param=exc.param, code="not_found", status=404) from None
    except FilterError as exc:
        raise APIError(str(exc), param=exc.param, code="invalid_value") from None
    except NoEmbeddingModel as exc:
        raise APIError(str(exc), code="no_embedding_model") from None
    except UploadTooLarge as exc:
        raise APIError(str(exc), "request_too_large", code="file_too_large", param="file") from None
    except DocumentsError as exc:
        raise APIError(str(exc), code="invalid_request") from None
    except EmbeddingFailed as exc:
        raise from_failure(f"the embedding model failed: {exc}", exc.code or "engine_error") from None
