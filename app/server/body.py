"""Reading a request body for the front door: within the size cap (T19) and a deadline (T41), before any
route runs, then handed to the route as if it had just arrived.

Reading it whole first costs nothing a route would not spend (every route parses a JSON body whole), and it
keeps the deadline off the response: once the route runs, the body is in memory, so a stream that lasts
minutes is never cut by it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from app.core.documents.uploads import cap_text

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

# The whole body, however large (8 MiB at most), must arrive within this: 8 MiB takes under 10 s even over
# a 1 MB/s Wi-Fi link, and a client dribbling bytes to hold a connection and its buffer is cut after it.
BODY_TIMEOUT_S = 30.0
# An upload streamed to its route must keep up at least this rate beyond the deadline above: 512 MiB takes
# under 9 minutes at 1 MiB/s, and a client dribbling bytes still cannot hold the connection for long.
MIN_UPLOAD_RATE = 1024 * 1024


class BodyTooLarge(Exception):
    """The body passed the cap; nothing more was read."""


class BodyTooSlow(Exception):
    """The body did not arrive within the deadline."""


async def read_body(receive: Receive, cap: int, timeout_s: float) -> bytes:
    """The whole request body; BodyTooLarge once it passes `cap`, BodyTooSlow if it takes over `timeout_s`.
    A client that leaves mid-body gives what had arrived (the route's answer goes nowhere)."""
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return b"".join(parts)
                part = message.get("body", b"")
                size += len(part)
                if size > cap:
                    raise BodyTooLarge
                parts.append(part)
                if not message.get("more_body", False):
                    return b"".join(parts)
    except TimeoutError:
        raise BodyTooSlow from None


def streamed(receive: Receive, cap: int, timeout_s: float, min_rate: float = MIN_UPLOAD_RATE) -> Receive:
    """A receive that passes the body on as it arrives (an upload of hundreds of MiB is never held in
    memory) and raises BodyTooLarge once it passes `cap`, BodyTooSlow once it falls behind `timeout_s` plus
    what has arrived at `min_rate`; the route reading it turns either into its answer."""
    start = time.monotonic()
    size = 0
    ended = False

    async def wrapped() -> Message:
        nonlocal size, ended
        if ended:
            return await receive()  # the disconnect a route may wait for: no deadline
        left = start + timeout_s + size / min_rate - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, left)):
                message = await receive()
        except TimeoutError:
            raise BodyTooSlow from None
        if message["type"] != "http.request":
            ended = True
            return message
        size += len(message.get("body", b""))
        if size > cap:
            raise BodyTooLarge(f"larger than {cap_text(cap)}")
        ended = not message.get("more_body", False)
        return message

    return wrapped


def declare_json(scope: MutableMapping[str, Any]) -> None:
    """Mark the request's body as JSON, whatever content type the client gave (in place, so what a route
    leaves in the scope's state stays where the request log reads it). For Ollama's routes, which read
    JSON whatever the type, as Ollama does: its own examples are `curl -d '{...}'`, which curl sends as
    application/x-www-form-urlencoded. The size cap and deadline above apply all the same."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-type"]
    scope["headers"] = [*headers, (b"content-type", b"application/json")]


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole once, then waits on the real one (for the disconnect, which a
    streaming route listens for)."""
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped
