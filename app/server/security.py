"""The front door, before any route: the Host header allowlist (DNS rebinding), CORS only for exact
origins the user added, the API key, caps on headers and body size (security.md T15–T19), and a deadline
for the body (T41).

A plain ASGI middleware, so it sees every request (404s and malformed bodies included) and answers
in OpenAI's error shape without reading more of a body than the cap.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from app.core.documents.uploads import MAX_UPLOAD_BYTES, cap_text
from app.server.body import BODY_TIMEOUT_S, BodyTooLarge, BodyTooSlow, read_body, replay, streamed
from app.server.errors import shaped_error

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_HEADERS = 100
# Routes that need no key: a liveness probe that says nothing about the models or the machine.
# Open without a key: they say only that the server is up (Ollama's clients probe `/` and ask for the
# version first; `/` answers a fixed "Ollama is running").
OPEN_PATHS = frozenset({"/", "/health", "/api/version"})
# Routes whose body is a file: streamed to the route within the upload cap (T57), never read whole here.
UPLOAD_PATHS = frozenset({"/v1/files"})
CLOSE = [(b"connection", b"close")]  # after a refused body: what is left of it is never read
ALLOW_HEADERS = (
    "authorization, content-type, x-api-key, openai-beta, anthropic-version, anthropic-beta, "
    "anthropic-dangerous-direct-browser-access, x-stainless-os"
)


@dataclass
class Policy:
    """What the front door lets in. `api_key` empty: no key asked for (loopback only)."""

    api_key: str = ""
    allowed_hosts: frozenset[str] = LOOPBACK_NAMES
    cors_origins: frozenset[str] = field(default_factory=frozenset)
    max_body_bytes: int = MAX_BODY_BYTES
    max_upload_bytes: int = MAX_UPLOAD_BYTES  # a file uploaded to /v1/files

    @classmethod
    def of(
        cls,
        *,
        api_key: str = "",
        extra_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> Policy:
        hosts = LOOPBACK_NAMES | {h.lower() for h in extra_hosts}
        return cls(api_key, frozenset(hosts), frozenset(o.rstrip("/") for o in cors_origins), max_body_bytes)


def host_name(value: str) -> str:
    """The host part of a Host header, without the port: `[::1]:8487` → `[::1]`, `localhost:1` → `localhost`."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _key_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class FrontDoor:
    """ASGI middleware applying a `Policy`; `policy` may be replaced while running (settings change)."""

    def __init__(self, app: ASGIApp, policy: Policy, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.policy = policy
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = self.policy
        raw = scope.get("headers", [])
        if len(raw) > MAX_HEADERS:
            await _reply(
                send, scope["path"], 400, "too many request headers", "invalid_request_error", "too_many_headers", CLOSE
            )
            return
        headers = _headers(scope)
        # Refused before its body is read: the connection closes rather than wait for a body nobody reads
        # (a client without the key could otherwise keep it open, trickling, until the header deadline).
        unread = CLOSE if _has_body(scope, headers) else []
        if host_name(headers.get("host", "")) not in policy.allowed_hosts:
            # DNS rebinding: a page on evil.example resolving to 127.0.0.1 still sends its own Host.
            await _reply(
                send,
                scope["path"],
                403,
                "this server answers only requests addressed to it by its own name (Host)",
                "permission_error",
                "host_not_allowed",
                unread,
            )
            return
        origin = headers.get("origin")
        allowed_origin = origin is not None and origin.rstrip("/") in policy.cors_origins
        if origin is not None and not allowed_origin:
            # Browsers send Origin; a page from an origin the user did not allow gets nothing at all.
            await _reply(
                send,
                scope["path"],
                403,
                f"requests from the web origin {origin[:100]!r} are not allowed",
                "permission_error",
                "origin_not_allowed",
                unread,
            )
            return
        cors = (
            [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
            if allowed_origin and origin is not None
            else []
        )
        if scope["method"] == "OPTIONS" and allowed_origin:
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": cors
                    + [
                        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                        (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
                        (b"access-control-max-age", b"600"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if policy.api_key and scope["path"] not in OPEN_PATHS and not self._authorized(headers, policy.api_key):
            await _reply(
                send,
                scope["path"],
                401,
                "a valid API key is needed (Authorization: Bearer <key>, or x-api-key)",
                "authentication_error",
                "invalid_api_key",
                cors + unread,
            )
            return
        length = headers.get("content-length")
        upload = scope["method"] == "POST" and scope["path"] in UPLOAD_PATHS
        cap = policy.max_upload_bytes if upload else policy.max_body_bytes
        too_large = f"the request body is larger than {cap_text(cap)}"
        if length is not None and (not length.isdigit() or int(length) > cap):
            await _reply(send, scope["path"], 413, too_large, "request_too_large", "body_too_large", cors + unread)
            return
        if unread and upload:
            receive = streamed(receive, cap, self.body_timeout_s)
        elif unread:
            # Read whole here, within the cap (a chunked body has no length to check up front) and the
            # deadline (T41), then replayed to the route; a refused one closes the connection.
            try:
                body = await read_body(receive, cap, self.body_timeout_s)
            except BodyTooLarge:
                await _reply(send, scope["path"], 413, too_large, "request_too_large", "body_too_large", cors + CLOSE)
                return
            except BodyTooSlow:
                slow = f"the request body did not arrive within {self.body_timeout_s:g} s"
                await _reply(send, scope["path"], 408, slow, "invalid_request_error", "request_timeout", cors + CLOSE)
                return
            receive = replay(body, receive)
        await self.app(scope, receive, _with_headers(send, cors))

    @staticmethod
    def _authorized(headers: dict[str, str], key: str) -> bool:
        bearer = headers.get("authorization", "")
        if bearer[:7].lower() == "bearer " and _key_matches(bearer[7:].strip(), key):
            return True
        return _key_matches(headers.get("x-api-key", "").strip(), key) if "x-api-key" in headers else False


def _has_body(scope: Scope, headers: dict[str, str]) -> bool:
    """Whether the request carries a body to read (h11 gives none without a length or chunked framing)."""
    if "transfer-encoding" in headers:
        return True
    length = headers.get("content-length")
    return length != "0" if length is not None else scope["method"] in ("POST", "PUT", "PATCH")


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    if not extra:
        return send

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = list(message.get("headers", [])) + extra
        await send(message)

    return wrapped


async def _reply(
    send: Send,
    path: str,
    status: int,
    message: str,
    type_: str,
    code: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    shaped, status = shaped_error(path, message, type_, code, status=status)
    body = json.dumps(shaped).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
