"""`/v1/vector_stores`: stores (collections), their files, file batches and search, as OpenAI's API has them.

Adding a file starts its indexing on the documents thread and answers at once with status "in_progress";
clients poll the file or batch until it is "completed" (or "failed", with `last_error`). The answers a
client polls carry `openai-poll-after-ms`, which OpenAI's SDKs wait for between two polls."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.core.documents.vector_stores import Batch, StoreFile, VectorStore
from app.server.context import hearth
from app.server.documents_calls import documents_call
from app.server.errors import APIError
from app.server.vector_stores.objects import batch_json, page, result_json, store_file_json, store_json
from app.server.vector_stores.schemas import AddFile, CreateBatch, CreateStore, Search, UpdateFile, UpdateStore

router = APIRouter()
POLL_AFTER_MS = "250"  # indexing a small file takes a moment; OpenAI's SDKs would wait 1 s by default
FILE_STATUSES = ("in_progress", "completed", "failed", "cancelled")


def _polled(body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, headers={"openai-poll-after-ms": POLL_AFTER_MS})


# -- stores -------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores")
async def create_store(body: CreateStore, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    made = await documents_call(stores.create, body.name, body.metadata, body.embedding_model)
    if body.file_ids:
        try:
            await documents_call(stores.create_batch, made.id, [(f, None) for f in body.file_ids])
        except APIError:
            await documents_call(stores.delete, made.id)  # nothing half-made stays behind
            raise
        made = await documents_call(stores.get, made.id)
    return store_json(made)


@router.get("/v1/vector_stores")
async def list_stores(
    request: Request, limit: int = 20, order: str = "desc", after: str | None = None, before: str | None = None
) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    listed = await documents_call(stores.all)
    return page(listed, store_json, limit=limit, order=order, after=after, before=before, created=_made, ident=_sid)


@router.get("/v1/vector_stores/{vector_store_id}")
async def get_store(vector_store_id: str, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    return store_json(await documents_call(stores.get, vector_store_id))


@router.post("/v1/vector_stores/{vector_store_id}")
async def update_store(vector_store_id: str, body: UpdateStore, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    return store_json(await documents_call(stores.update, vector_store_id, body.name, body.metadata))


@router.delete("/v1/vector_stores/{vector_store_id}")
async def delete_store(vector_store_id: str, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    await documents_call(stores.delete, vector_store_id)
    return {"id": vector_store_id, "object": "vector_store.deleted", "deleted": True}


# -- files --------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{vector_store_id}/files")
async def add_file(vector_store_id: str, body: AddFile, request: Request) -> JSONResponse:
    stores = hearth(request).vector_stores()
    added = await documents_call(stores.add_file, vector_store_id, body.file_id, body.attributes)
    return _polled(store_file_json(added))


@router.get("/v1/vector_stores/{vector_store_id}/files")
async def list_files(
    vector_store_id: str,
    request: Request,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
    filter: str | None = None,
) -> dict[str, Any]:
    _check_status(filter)
    stores = hearth(request).vector_stores()
    files = await documents_call(stores.files, vector_store_id, filter)
    return page(
        files, store_file_json, limit=limit, order=order, after=after, before=before, created=_fmade, ident=_fid
    )


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def get_file(vector_store_id: str, file_id: str, request: Request) -> JSONResponse:
    stores = hearth(request).vector_stores()
    return _polled(store_file_json(await documents_call(stores.file, vector_store_id, file_id)))


@router.post("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def update_file(vector_store_id: str, file_id: str, body: UpdateFile, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    return store_file_json(await documents_call(stores.set_attributes, vector_store_id, file_id, body.attributes))


@router.get("/v1/vector_stores/{vector_store_id}/files/{file_id}/content")
async def file_content(vector_store_id: str, file_id: str, request: Request) -> dict[str, Any]:
    """The file's passages as indexed (OpenAI's parsed content)."""
    stores = hearth(request).vector_stores()
    texts = await documents_call(stores.passages, vector_store_id, file_id)
    return {
        "object": "vector_store.file_content.page",
        "data": [{"type": "text", "text": t} for t in texts],
        "has_more": False,
        "next_page": None,
    }


@router.delete("/v1/vector_stores/{vector_store_id}/files/{file_id}")
async def remove_file(vector_store_id: str, file_id: str, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    await documents_call(stores.remove_file, vector_store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


# -- batches ------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{vector_store_id}/file_batches")
async def create_batch(vector_store_id: str, body: CreateBatch, request: Request) -> JSONResponse:
    if body.file_ids and body.files:
        raise APIError("give file_ids or files, not both", param="files")
    if body.files:
        files: list[tuple[str, object]] = [(f.file_id, f.attributes) for f in body.files]
    elif body.file_ids:
        files = [(f, body.attributes) for f in body.file_ids]
    else:
        raise APIError("file_ids (or files) must name at least one file", param="file_ids")
    stores = hearth(request).vector_stores()
    return _polled(batch_json(await documents_call(stores.create_batch, vector_store_id, files)))


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}")
async def get_batch(vector_store_id: str, batch_id: str, request: Request) -> JSONResponse:
    stores = hearth(request).vector_stores()
    return _polled(batch_json(await documents_call(stores.batch, vector_store_id, batch_id)))


@router.get("/v1/vector_stores/{vector_store_id}/file_batches/{batch_id}/files")
async def batch_files(
    vector_store_id: str,
    batch_id: str,
    request: Request,
    limit: int = 20,
    order: str = "desc",
    after: str | None = None,
    before: str | None = None,
    filter: str | None = None,
) -> dict[str, Any]:
    _check_status(filter)
    stores = hearth(request).vector_stores()
    batch: Batch = await documents_call(stores.batch, vector_store_id, batch_id)
    files = [f for f in batch.files if filter is None or f.status == filter]
    return page(
        files, store_file_json, limit=limit, order=order, after=after, before=before, created=_fmade, ident=_fid
    )


# -- search -------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{vector_store_id}/search")
async def search(vector_store_id: str, body: Search, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    queries = [body.query] if isinstance(body.query, str) else body.query
    ranking = body.ranking_options
    results = await documents_call(
        stores.search,
        [vector_store_id],
        queries,
        limit=body.max_num_results,
        filters=body.filters,
        rerank=ranking is None or ranking.ranker != "none",
        score_threshold=ranking.score_threshold or 0.0 if ranking is not None else 0.0,
    )
    return {
        "object": "vector_store.search_results.page",
        "search_query": queries,
        "data": [result_json(r) for r in results],
        "has_more": False,
        "next_page": None,
    }


def _check_status(status: str | None) -> None:
    if status is not None and status not in FILE_STATUSES:
        raise APIError(f"filter must be one of {', '.join(FILE_STATUSES)}", param="filter", code="invalid_value")


def _made(s: VectorStore) -> int:
    return s.created_at


def _sid(s: VectorStore) -> str:
    return s.id


def _fmade(f: StoreFile) -> int:
    return f.created_at


def _fid(f: StoreFile) -> str:
    return f.id
