"""Server-sent events, the one framing of every streaming route: OpenAI's chat and completions send bare
`data:` lines ending with `[DONE]`; the Responses and Anthropic Messages APIs name each event (`event:`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

PING = b": ping\n\n"  # an SSE comment: keeps proxies and clients from timing out during a long prefill
PING_EVERY_S = 5.0
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse(data: dict[str, Any] | str) -> bytes:
    """One unnamed event (OpenAI's chat and completions streams)."""
    return f"data: {data if isinstance(data, str) else _json(data)}\n\n".encode()


def named_sse(data: dict[str, Any]) -> bytes:
    """One event named by its own `type` (the Responses and Messages streams)."""
    return f"event: {data['type']}\ndata: {_json(data)}\n\n".encode()


DONE = sse("[DONE]")


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
