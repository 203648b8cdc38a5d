"""One tiny request through the route a tool uses, to show whether the server answers it as the tool will
see it: the reply's first words, or the error each API family reports, or that nothing listens."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from app.core.connect.target import KEY_PLACEHOLDER, ROUTE_NAMES, ROUTE_PATHS, Route, Target

logger = logging.getLogger(__name__)

PROMPT = "Say hi"
MAX_TOKENS = 8
ANTHROPIC_VERSION = "2023-06-01"
CONNECT_TIMEOUT_S = 3.0
# A request for a model that is not loaded waits for the load (JIT); a large model takes a while.
READ_TIMEOUT_S = 120.0
SHOWN_CHARS = 160


@dataclass(frozen=True)
class ProbeResult:
    route: Route
    ok: bool
    status: int | None  # the HTTP status; None when no answer came
    text: str  # the reply's text, or why there is none
    elapsed_s: float = 0.0

    def summary(self) -> str:
        """One line: `Responses: OK — “Hi!” (0.4 s)` or `Messages: 401 — the key is wrong`."""
        name = ROUTE_NAMES[self.route]
        if self.ok:
            return f"{name}: OK — “{self.text}” ({self.elapsed_s:.1f} s)"
        head = f"{name}: {self.status}" if self.status is not None else f"{name}: failed"
        return f"{head} — {self.text}"


def request_for(route: Route, target: Target) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The path, headers and body of the test request for `route`, as the route's clients send them."""
    model, key = target.model_id, target.api_key or KEY_PLACEHOLDER
    if route == "messages":
        headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": PROMPT}],
        }
    elif route == "responses":
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": model, "input": PROMPT, "max_output_tokens": MAX_TOKENS}
    elif route == "ollama":
        # Ollama streams unless told not to; one whole reply is what a Test can read back.
        headers = {"Authorization": f"Bearer {key}"}
        body = {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": False,
            "options": {"num_predict": MAX_TOKENS},
        }
    else:
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PROMPT}]}
    return ROUTE_PATHS[route], headers, body


def probe_route(
    base_url: str,
    key: str,
    model: str,
    route: Route,
    *,
    transport: httpx.BaseTransport | None = None,
    timeout: httpx.Timeout | None = None,
) -> ProbeResult:
    """Send the test request and say what came back. Blocking: call it off the UI thread.
    `base_url` with or without /v1; `key` "" sends the placeholder."""
    target = Target(base_url, key, model)
    path, headers, body = request_for(route, target)
    timeout = timeout or httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    url = target.root + path
    start = time.monotonic()
    try:
        # trust_env off: a proxy from the environment must not stand between a client and a local server.
        with httpx.Client(transport=transport, timeout=timeout, trust_env=False) as client:
            reply = client.post(url, json=body, headers=headers)
    except httpx.ConnectError:
        return ProbeResult(route, False, None, f"nothing is listening at {target.root}: start the server first")
    except httpx.TimeoutException:
        return ProbeResult(route, False, None, f"no answer from {target.root} in time")
    except httpx.HTTPError as exc:
        return ProbeResult(route, False, None, f"the request failed: {exc}")
    elapsed = time.monotonic() - start
    try:
        data: Any = reply.json()
    except ValueError:
        data = None
    if reply.is_success:
        text = reply_text(route, data)
        if text is None:
            return ProbeResult(route, False, reply.status_code, "the reply is not in this API's shape", elapsed)
        return ProbeResult(route, True, reply.status_code, _short(text) or "(an empty reply)", elapsed)
    logger.info("test request to %s answered %s", url, reply.status_code)
    return ProbeResult(route, False, reply.status_code, _short(error_text(data) or reply.reason_phrase), elapsed)


def reply_text(route: Route, data: Any) -> str | None:
    """The reply's text in each route's shape; None when `data` is not that shape."""
    try:
        if route == "chat":
            return data["choices"][0]["message"].get("content") or ""
        if route == "ollama":
            content = data["message"].get("content")
            return content if isinstance(content, str) else None
        if route == "responses":
            items = [c for o in data["output"] for c in o.get("content") or [] if c.get("type") == "output_text"]
            return "".join(c.get("text", "") for c in items)
        return "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def error_text(data: Any) -> str:
    """The message in OpenAI's `{"error": {"message"}}`, Anthropic's `{"type": "error", "error": {"type",
    "message"}}`, Ollama's `{"error": "…"}` or FastAPI's `{"detail"}`; "" for anything else."""
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, dict) and error.get("message"):
        kind = error.get("type") if data.get("type") == "error" else None  # Anthropic names the kind
        return f"{error['message']} ({kind})" if kind else str(error["message"])
    if isinstance(error, str):
        return error
    detail = data.get("detail")
    return detail if isinstance(detail, str) else ""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
