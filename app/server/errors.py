"""Errors in each API's own shape: OpenAI's `{"error": {"message", "type", "param", "code"}}` (string codes,
and the HTTP status llama-server uses for each type, so clients that branch on either keep working), and
Anthropic's `{"type": "error", "error": {"type", "message"}}` on the Messages routes, with its types and
its 529 for an overloaded server, and Ollama's `{"error": "..."}` on its `/api/` routes. Routes raise one
APIError; the path decides how it is written."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "not_supported_error": 501,
    "unavailable_error": 503,
    "server_error": 500,
}
# A host job's failure code → (error type, HTTP status).
FAILURES = {
    "context_length_exceeded": ("invalid_request_error", 400),
    "model_not_found": ("invalid_request_error", 404),
    "invalid_request": ("invalid_request_error", 400),
    "invalid_image": ("invalid_request_error", 400),  # an image that cannot be read safely (engines/inputs/images.py)
    "schema_too_complex": ("invalid_request_error", 400),
    "request_too_large": ("request_too_large", 413),  # an embeddings request over its token or character cap
    "unsupported": ("invalid_request_error", 400),
    # A load (JIT, a bigger context, an explicit one) the planner refuses: the request asked for more than this
    # machine holds beside the models kept loaded; the message carries the planner's reasons.
    "does_not_fit": ("invalid_request_error", 400),
    "model_limit": ("invalid_request_error", 409),  # the cap on loaded models, with pinned models in the way
    "model_pinned": ("invalid_request_error", 409),  # an API request may not unload a pinned model
    "busy": ("unavailable_error", 503),
    "unavailable": ("unavailable_error", 503),
    "cancelled": ("unavailable_error", 503),
    "engine_error": ("server_error", 500),
}


ANTHROPIC_PREFIX = "/v1/messages"
# OpenAI's error type → Anthropic's (anything unlisted is invalid_request_error).
ANTHROPIC_TYPES = {
    "authentication_error": ("authentication_error", 401),
    "permission_error": ("permission_error", 403),
    "not_found_error": ("not_found_error", 404),
    "request_too_large": ("request_too_large", 413),
    "unavailable_error": ("overloaded_error", 529),
    "server_error": ("api_error", 500),
}


OLLAMA_PREFIX = "/api/"
LMSTUDIO_PREFIX = "/api/v1/"  # LM Studio's routes share Ollama's prefix and answer in OpenAI's shape


def is_ollama(path: str) -> bool:
    return path.startswith(OLLAMA_PREFIX) and not path.startswith(LMSTUDIO_PREFIX)


def is_anthropic(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def anthropic_error(message: str, type_: str) -> tuple[dict[str, Any], int]:
    """Anthropic's body and status for an error of (OpenAI's) `type_`."""
    kind, status = ANTHROPIC_TYPES.get(type_, ("invalid_request_error", 0))
    return {"type": "error", "error": {"type": kind, "message": message}}, status


def shaped_error(
    path: str, message: str, type_: str, code: str | None = None, param: str | None = None, status: int | None = None
) -> tuple[dict[str, Any], int]:
    """The body and status of an error on `path`, in the shape its API uses."""
    status = status or STATUS.get(type_, 400)
    if is_ollama(path):  # Ollama's shape is the message alone; its clients read the status for the rest
        return {"error": message.replace("(see GET /v1/models)", "(see GET /api/tags)")}, status
    if is_anthropic(path):
        if status == 404:
            type_ = "not_found_error"  # a missing model is "invalid_request_error" to OpenAI, 404 to both
        body, own = anthropic_error(message, type_)
        return body, own or (status if status < 500 else 500)
    return error_body(message, type_, code, param), status


class APIError(Exception):
    """Raised by a route: becomes the error response."""

    def __init__(
        self,
        message: str,
        type_: str = "invalid_request_error",
        *,
        code: str | None = None,
        param: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.type, self.code, self.param = message, type_, code, param
        self.status = status or STATUS.get(type_, 400)
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(
    path: str,
    message: str,
    type_: str,
    *,
    code: str | None = None,
    param: str | None = None,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body, status = shaped_error(path, message, type_, code, param, status)
    return JSONResponse(body, status_code=status, headers=headers)


def from_failure(message: str, code: str, retry_after: float | None = None, param: str | None = None) -> APIError:
    """The API error for a host job that failed with `code` (`param`: the request field at fault)."""
    type_, status = FAILURES.get(code, ("server_error", 500))
    headers = {"Retry-After": str(int(retry_after))} if retry_after else None
    return APIError(message, type_, code=code, param=param, status=status, headers=headers)


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return error_response(
        request.url.path,
        exc.message,
        exc.type,
        code=exc.code,
        param=exc.param,
        status=exc.status,
        headers=exc.headers or None,
    )


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """A body that is not JSON, or does not match the request model: 400, naming the first bad field."""
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    # A value that is one type of a union but breaks its bounds says more than "not the other type".
    errors.sort(key=lambda e: str(e.get("type", "")).endswith("_type"))
    first = errors[0] if errors else {}
    where = [str(p) for p in first.get("loc", ()) if p != "body" and not _union_tag(p)]
    param = ".".join(where) or None
    context = first.get("ctx") or {}
    code = "invalid_value"
    if first.get("type") == "json_invalid":
        message, param = "the request body is not valid JSON", None
    elif "param" in context:  # request_text's checks name the field (and their code) themselves
        message, param, code = str(first.get("msg")), context["param"], context.get("code") or code
    else:
        message = f"{param or 'the request body'}: {first.get('msg', 'invalid value')}"
    return error_response(request.url.path, message, "invalid_request_error", code=code, param=param)


UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _union_tag(part: object) -> bool:
    """Whether a location part names a union member (`str`, `list[...]`, a model class), not a field."""
    if not isinstance(part, str):
        return False
    return part in UNION_TAGS or "[" in part or part[:1].isupper()


async def http_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    type_ = {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        405: "invalid_request_error",
        413: "request_too_large",
    }.get(exc.status_code, "invalid_request_error")
    if exc.status_code >= 500:
        type_ = "server_error"
    message = str(exc.detail)
    if exc.status_code == 404 and message == "Not Found":  # no route: say which there are
        message = f"there is no {request.method} {request.url.path[:200]} here; {ROUTES_HINT}"
    return error_response(request.url.path, message, type_, status=exc.status_code)


ROUTES_HINT = (
    "Hearth answers OpenAI's /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, "
    "/v1/models, /v1/files and /v1/vector_stores, Anthropic's /v1/messages, and Ollama's /api/chat, "
    "/api/generate, /api/embed, /api/tags, /api/show and /api/ps"
)


async def unexpected_error_handler(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("request failed", exc_info=exc)
    return error_response(request.url.path, f"the server failed: {type(exc).__name__}", "server_error", status=500)
