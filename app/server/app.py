"""The app factory: the OpenAI routes over the core's engine host, behind the front door (security.py),
with every error in OpenAI's shape and every request in the log."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import __version__
from app.server import errors
from app.server.anthropic.messages import router as messages_router
from app.server.body import BODY_TIMEOUT_S, declare_json
from app.server.context import ServerContext
from app.server.models.admin import router as admin_router
from app.server.models.listing import router as models_router
from app.server.models.rerank import router as rerank_router
from app.server.ollama.chat import router as ollama_chat_router
from app.server.ollama.embed import router as ollama_embed_router
from app.server.ollama.models import router as ollama_models_router
from app.server.ollama.pull import router as ollama_pull_router
from app.server.openai.chat import router as chat_router
from app.server.openai.completions import router as completions_router
from app.server.openai.embeddings import router as embeddings_router
from app.server.request_log import RequestLog, Timer
from app.server.responses.routes import router as responses_router
from app.server.security import ASGIApp, FrontDoor, Message, Policy, Receive, Scope, Send
from app.server.vector_stores.files import router as files_router
from app.server.vector_stores.stores import router as vector_stores_router

logger = logging.getLogger(__name__)


def create_app(ctx: ServerContext, policy: Policy | None = None, *, body_timeout_s: float = BODY_TIMEOUT_S) -> ASGIApp:
    """The ASGI app to serve: FastAPI's routes inside the front door, and the request log outside it, so
    the requests it refuses (a wrong key, a foreign Host or origin, a body too slow) are in the log too."""
    api = FastAPI(
        title="Hearth",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        description="OpenAI-, Anthropic- and Ollama-compatible API over the models in Hearth's library.",
    )
    api.state.hearth = ctx
    api.add_exception_handler(errors.APIError, errors.api_error_handler)
    api.add_exception_handler(RequestValidationError, errors.validation_error_handler)
    api.add_exception_handler(StarletteHTTPException, errors.http_error_handler)
    api.add_exception_handler(Exception, errors.unexpected_error_handler)
    routers = (
        models_router,
        embeddings_router,
        admin_router,
        chat_router,
        completions_router,
        responses_router,
        messages_router,
        rerank_router,
        ollama_models_router,
        ollama_chat_router,
        ollama_embed_router,
        ollama_pull_router,
        files_router,
        vector_stores_router,
    )
    for router in routers:
        api.include_router(router)
    _document_errors(api)
    return _Logged(FrontDoor(_OllamaBodies(api), policy or Policy(), body_timeout_s), ctx.log)


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
ANTHROPIC_ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
OLLAMA_ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
# What any route may answer besides success: OpenAI's error shape, with llama-server's statuses.
ERRORS = {
    "400": "invalid request (also a prompt over the context: code context_length_exceeded)",
    "401": "missing or wrong API key",
    "403": "Host or Origin not allowed",
    "404": "no such model or route",
    "408": "the request body did not arrive in time",
    "413": "request body too large",
    "500": "the engine failed",
    "501": "not supported",
    "503": "the engine is busy (Retry-After) or stopping",
}
# The Messages routes answer in Anthropic's shape, and 529 where OpenAI's answer 503.
ANTHROPIC_ERRORS = {**{k: v for k, v in ERRORS.items() if k not in ("501", "503")}, "529": ERRORS["503"]}


STREAMING = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
NDJSON_STREAMING = ("/api/chat", "/api/generate", "/api/pull")  # Ollama's: one JSON object per line


def _document_errors(api: FastAPI) -> None:
    """/openapi.json as the API answers: errors in OpenAI's shape (never FastAPI's 422), SSE for streams."""
    build = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is not None:
            return api.openapi_schema
        schema = build()
        for route, path in schema.get("paths", {}).items():
            for operation in path.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                anthropic = errors.is_anthropic(route)
                shape = ANTHROPIC_ERROR_SCHEMA if anthropic else ERROR_SCHEMA
                if errors.is_ollama(route):
                    shape = OLLAMA_ERROR_SCHEMA
                for status, text in (ANTHROPIC_ERRORS if anthropic else ERRORS).items():
                    responses.setdefault(
                        status, {"description": text, "content": {"application/json": {"schema": shape}}}
                    )
                if route in STREAMING:
                    ok = responses.setdefault("200", {"description": "Successful Response"}).setdefault("content", {})
                    ok.setdefault("text/event-stream", {"schema": {}})
                if route in NDJSON_STREAMING:
                    ok = responses.setdefault("200", {"description": "Successful Response"}).setdefault("content", {})
                    ok.setdefault("application/x-ndjson", {"schema": {}})
        schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
        schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)
        api.openapi_schema = schema
        return schema

    api.openapi = openapi  # type: ignore[method-assign]


class _OllamaBodies:
    """Ollama's routes read their body as JSON whatever its content type (body.declare_json); inside the
    front door, so the Host, origin, key and size checks have already passed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and errors.is_ollama(scope["path"]):
            declare_json(scope)
        await self.app(scope, receive, send)


class _Logged:
    """Records each request (status, duration, and the model and usage a route left in request.state)
    once its response has been sent, streams included."""

    def __init__(self, app: ASGIApp, log: RequestLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timer = Timer(self.log, scope["method"], scope["path"])
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            state = scope.get("state", {})
            timer.done(status, state.get("model", ""), state.get("usage"))
