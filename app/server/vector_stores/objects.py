"""The objects the Files and Vector Stores API answers with, in OpenAI's shapes, and its list pages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from app.core.documents.uploads import UploadedFile
from app.core.documents.vector_stores import Batch, SearchResult, StoreFile, VectorStore
from app.server.errors import APIError

T = TypeVar("T")
MAX_PAGE = 100


def file_json(f: UploadedFile) -> dict[str, Any]:
    return {
        "id": f.id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": f.created_at,
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def store_json(s: VectorStore) -> dict[str, Any]:
    return {
        "id": s.id,
        "object": "vector_store",
        "created_at": s.created_at,
        "name": s.name,
        "description": None,
        "usage_bytes": s.usage_bytes,
        "file_counts": s.file_counts,
        "status": s.status,
        "expires_after": None,
        "expires_at": None,
        "last_active_at": s.last_active_at,
        "metadata": s.metadata,
        "embedding_model": s.embedding_model,  # Hearth's own: which library model embeds this store
    }


def store_file_json(f: StoreFile) -> dict[str, Any]:
    return {
        "id": f.id,
        "object": "vector_store.file",
        "created_at": f.created_at,
        "usage_bytes": f.usage_bytes,
        "vector_store_id": f.store_id,
        "status": f.status,
        "last_error": f.last_error,
        "attributes": f.attributes,
        "chunking_strategy": {"type": "other"},  # cut by the embedding model's size, not OpenAI's static sizes
    }


def batch_json(b: Batch) -> dict[str, Any]:
    return {
        "id": b.id,
        "object": "vector_store.files_batch",
        "created_at": b.created_at,
        "vector_store_id": b.store_id,
        "status": b.status,
        "file_counts": b.file_counts,
    }


def result_json(r: SearchResult) -> dict[str, Any]:
    """A search endpoint's result."""
    return {
        "file_id": r.file_id,
        "filename": r.filename,
        "score": r.score,
        "attributes": r.attributes,
        "content": [{"type": "text", "text": r.text}],
    }


def page(
    items: Sequence[T],
    to_json: Callable[[T], dict[str, Any]],
    *,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
    created: Callable[[T], int],
    ident: Callable[[T], str],
    max_limit: int = MAX_PAGE,
) -> dict[str, Any]:
    """OpenAI's cursor page: newest first unless `order` is asc, `limit` (1–100) items after/before an id."""
    if not 1 <= limit <= max_limit:
        raise APIError(f"limit must be between 1 and {max_limit}", param="limit", code="invalid_value")
    if order not in ("asc", "desc"):
        raise APIError("order must be asc or desc", param="order", code="invalid_value")
    ordered = sorted(items, key=created, reverse=order == "desc")  # stable: equal times keep their order
    ids = [ident(i) for i in ordered]
    start, end = 0, len(ordered)
    for cursor, name in ((after, "after"), (before, "before")):
        if cursor is None:
            continue
        if cursor not in ids:
            raise APIError(f"{name}: no object with id {cursor[:100]!r} in this list", param=name, code="invalid_value")
    if after is not None:
        start = ids.index(after) + 1
    if before is not None:
        end = ids.index(before)
    window = ordered[start:end]
    chosen = window[-limit:] if before is not None and after is None else window[:limit]
    data = [to_json(i) for i in chosen]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > len(chosen),
    }
