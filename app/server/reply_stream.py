"""The two ways a route streams a generation; which one a route uses follows from what its wire needs.

- `reply_steps`: the reply as the chat shape's parser reads it (text, reasoning, tool-call events), a `Ping`
  when nothing came for a while, then `Finished` or `Broken`. The tool-call limit and the failure rules are
  applied here. Every route whose stream is made of those events uses it (Responses, Messages, Ollama), and
  `whole_events` gives its non-streaming reply the same events.
- `framed`: the engine's chunks themselves, each handed to the route with its logprobs, and the job's end.
  Only for a wire that needs what the parser drops: per-token logprobs that must go out with their text
  (Chat Completions), or text no chat shape parses (Completions). Such a route applies the failure rules
  (and, with tools, the tool-call limit) itself, as reply_steps does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from app.core.engines.base import Chunk
from app.core.runtime.jobs import ChunkEvent, JobDone, JobFailed
from app.core.tools import OutputEvent, ToolCallStart
from app.server.chat_output import ChatShape
from app.server.job_stream import JobStream, stream_failure
from app.server.sse import PING, PING_EVERY_S


@dataclass(frozen=True)
class Ping:
    """Nothing arrived for a while (a long prompt evaluation): send the API's keep-alive."""


@dataclass(frozen=True)
class Finished:
    final: Chunk  # finish_reason and stats
    called: bool  # the reply made a tool call


@dataclass(frozen=True)
class Broken:
    """The generation failed after it began: the stream ends with the API's error event."""

    message: str
    type: str
    code: str


Step = list[OutputEvent] | Ping | Finished | Broken

# How long a streaming route holds its response for the first output once the job has started
# (replies.started): the engine reads the prompt with the loop asleep. A short prompt's first token comes
# well within it on a CPU (tens of ms); a client that waits less than this for headers would be rare.
FIRST_OUTPUT_WAIT_S = 0.25


def response_hold_s() -> float:
    """The hold before a streaming response starts: FIRST_OUTPUT_WAIT_S, never past the keep-alive interval
    (a long prompt gets its headers and pings as before)."""
    return min(FIRST_OUTPUT_WAIT_S, PING_EVERY_S)


async def reply_steps(stream: JobStream, shape: ChatShape, ping_every: float | None = None) -> AsyncIterator[Step]:
    """For a route that streams what the parser reads: the reply's parser events up to its end (a Finished
    or Broken, always last). Once every call the request allows is out, the rest of the generation is not
    needed: it is stopped, and ends as Finished."""
    parser = shape.parser()
    called = enough = False
    try:
        async for batch in stream.relay(ping_every or PING_EVERY_S):
            if batch is None:
                yield Ping()
                continue
            events: list[OutputEvent] = []
            for event in batch:
                if isinstance(event, ChunkEvent):
                    if event.chunk.text:
                        new = parser.feed(event.chunk.text)
                        called = called or any(isinstance(e, ToolCallStart) for e in new)
                        events += new
                        if called and parser.limit_reached and not enough:
                            enough = True
                            stream.handle.cancel()
                    continue
                cut = isinstance(event, JobDone) and event.result.final.finish_reason == "length"
                events += parser.finish(truncated=cut)
                called = called or any(isinstance(e, ToolCallStart) for e in events)
                if events:
                    yield events
                    events = []
                if enough and isinstance(event, JobDone) and event.result.final.finish_reason == "cancelled":
                    yield Finished(replace(event.result.final, finish_reason="stop"), True)
                    return
                failure = stream_failure(event)
                if failure is not None:
                    error = failure["error"]
                    yield Broken(error["message"], error["type"], error["code"] or "engine_error")
                elif isinstance(event, JobDone):
                    yield Finished(event.result.final, called)
                return
            if events:
                yield events
    finally:
        stream.cancel()  # the client left, or we are done (then a no-op)


def whole_events(shape: ChatShape, text: str, final: Chunk) -> list[OutputEvent]:
    """A whole reply's parser events, exactly as its stream would have given them (a call the token limit
    cut off is dropped, as there)."""
    parser = shape.parser()
    truncated = final.finish_reason == "length"
    return parser.feed(text) + parser.finish(truncated) if text else parser.finish(truncated)


async def framed(
    stream: JobStream,
    on_chunk: Callable[[Chunk], list[bytes]],
    on_end: Callable[[JobDone | JobFailed], list[bytes]],
    ping: bytes = PING,
) -> AsyncIterator[bytes]:
    """For a route that needs the engine's chunks (the module's docstring says when): its body, the job's
    events relayed in batches, each chunk and then its end framed by the route, `ping` when nothing came
    for a while. A client that leaves cancels the generator, and so the job, within one token."""
    try:
        async for batch in stream.relay(PING_EVERY_S):
            if batch is None:
                yield ping
                continue
            out: list[bytes] = []
            for event in batch:
                out += on_chunk(event.chunk) if isinstance(event, ChunkEvent) else on_end(event)
            if out:
                yield b"".join(out)
    finally:
        stream.cancel()  # the client left, or we are done (then a no-op)
