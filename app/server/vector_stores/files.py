"""`/v1/files`: uploads (multipart, `file` and `purpose`), their listing, retrieval, bytes and deletion.

The body is streamed here by the front door within the upload cap (security.py, T57): python-multipart
spools the file to a private temporary file as it arrives, and documents/uploads.py copies it into the
uploads folder under a name reduced to one path component (T56)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.datastructures import UploadFile

from app.core.documents.uploads import PURPOSES, UploadedFile
from app.server.body import BodyTooLarge, BodyTooSlow
from app.server.context import hearth
from app.server.documents_calls import documents_call
from app.server.errors import APIError
from app.server.vector_stores.objects import file_json, page

router = APIRouter()
CLOSE = {"Connection": "close"}  # what is left of a refused body is never read


@router.post("/v1/files")
async def upload_file(request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    try:
        form = await request.form(max_files=1, max_fields=8)
    except BodyTooLarge as exc:
        raise APIError(
            f"the upload is {exc or 'larger than the cap'}",
            "request_too_large",
            code="file_too_large",
            param="file",
            headers=CLOSE,
        ) from None
    except BodyTooSlow:
        raise APIError(
            "the upload did not arrive in time", code="request_timeout", param="file", status=408, headers=CLOSE
        ) from None
    except Exception as exc:  # python-multipart's and starlette's errors for a malformed body
        raise APIError(f"the body is not a multipart form: {exc}"[:300], code="invalid_value") from None
    try:
        upload = form.get("file")
        purpose = form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise APIError("file is required: a multipart file field named file", param="file")
        if not isinstance(purpose, str) or not purpose:
            raise APIError(f"purpose is required: one of {', '.join(PURPOSES)}", param="purpose")
        if purpose not in PURPOSES:
            raise APIError(f"purpose must be one of {', '.join(PURPOSES)}", param="purpose", code="invalid_value")
        saved = await documents_call(stores.uploads.save, upload.file, upload.filename or "", purpose)
    finally:
        await form.close()
    return file_json(saved)


@router.get("/v1/files")
async def list_files(
    request: Request,
    purpose: str | None = None,
    limit: int = 10_000,
    order: str = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    files = await documents_call(stores.uploads.list, purpose)
    return page(
        files,
        file_json,
        limit=limit,
        order=order,
        after=after,
        before=None,
        created=_created,
        ident=_ident,
        max_limit=10_000,  # OpenAI's files list allows this many a page
    )


def _created(f: UploadedFile) -> int:
    return f.created_at


def _ident(f: UploadedFile) -> str:
    return f.id


@router.get("/v1/files/{file_id}")
async def get_file(file_id: str, request: Request) -> dict[str, Any]:
    return file_json(await _find(request, file_id))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, request: Request) -> FileResponse:
    found = await _find(request, file_id)
    return FileResponse(found.path, media_type="application/octet-stream", filename=found.filename)


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, request: Request) -> dict[str, Any]:
    stores = hearth(request).vector_stores()
    if not await documents_call(stores.delete_upload, file_id):
        raise _missing(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


async def _find(request: Request, file_id: str) -> UploadedFile:
    stores = hearth(request).vector_stores()
    found = await documents_call(stores.uploads.get, file_id)
    if found is None:
        raise _missing(file_id)
    return found


def _missing(file_id: str) -> APIError:
    return APIError(f"No such File object: {file_id[:100]!r}", param="file_id", code="not_found", status=404)
