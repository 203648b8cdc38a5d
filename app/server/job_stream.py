"""A host job seen from the server's event loop: its events arrive on an asyncio queue (the sink only
re-posts, on the host thread), and a client that goes away cancels it within one poll."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import AsyncIterator

from fastapi import Request

from app.core.engines.base import Chunk
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import ChunkEvent, HostBusy, HostClosed, HostEvent, Job, JobDone, JobFailed, JobHandle
from app.server.errors import FAILURES, APIError, error_body, from_failure

logger = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.1  # a job of a client that left is cancelled within this (plus one token or batch)


class JobStream:
    """`await stream.next()` gives the job's events in order; None once the client has disconnected."""

    def __init__(self, host: JobHost, job: Job, request: Request, live: weakref.WeakSet[JobStream]) -> None:
        self.request = request
        self.queue: asyncio.Queue[HostEvent] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self.finished = False
        # Events from the host thread wait here until the loop takes them: one wake-up for a burst,
        # not one per token (each wake-up is a syscall and a loop turn).
        self._inbox: list[HostEvent] = []
        self._inbox_lock = threading.Lock()
        self._arrived = asyncio.Event()  # set when events reach the queue (for `settle`)
        try:
            self.handle: JobHandle = host.submit(job, self._sink)
        except HostBusy as exc:
            raise from_failure(str(exc), "busy", exc.retry_after) from exc
        except HostClosed as exc:
            raise from_failure(str(exc), "unavailable") from exc
        live.add(self)  # the server's open streams: stopping it cancels their jobs

    def _sink(self, event: HostEvent) -> None:
        """Host thread: hand over and return (a closed loop raises here, and the host cancels the job)."""
        with self._inbox_lock:
            self._inbox.append(event)
            wake = len(self._inbox) == 1
        if wake:
            self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        """Event loop: move what arrived into the queue, in order."""
        with self._inbox_lock:
            events, self._inbox = self._inbox, []
        for event in events:
            self.queue.put_nowait(event)
        self._arrived.set()

    async def settle(self, timeout: float) -> None:
        """Wait, taking nothing, until the next event is in the queue or `timeout` passes. A route that
        waits here before it starts its response leaves the engine's first prompt batch to the cores: on
        a machine whose cores all run the engine, the loop's work meanwhile (headers, a first empty chunk)
        held the engine's threads at their barriers, and the first token came ~5 ms later (2 cores)."""
        if not self.queue.empty():
            return
        self._arrived.clear()
        if not self.queue.empty():  # delivered between the check and the clear
            return
        try:
            async with asyncio.timeout(timeout):
                await self._arrived.wait()
        except TimeoutError:
            pass

    async def next(self, poll: bool = True) -> HostEvent | None:
        """The next event. With `poll`, watch for the client leaving meanwhile (then the job is cancelled
        and None comes back); without, the caller's framework watches (a streaming response does)."""
        while True:
            try:
                async with asyncio.timeout(DISCONNECT_POLL_S if poll else None):
                    event = await self.queue.get()
            except TimeoutError:
                if await self.request.is_disconnected():
                    self.cancel()
                    return None
                continue
            if isinstance(event, (JobDone, JobFailed)):
                self.finished = True
            return event

    async def result(self, chunks: list[Chunk] | None = None) -> JobDone | None:
        """Wait for the end; raises the job's failure as an APIError; None if the client left. `chunks`
        gets the job's chunks, for a caller that needs more than the text (logprobs)."""
        while True:
            event = await self.next()
            if event is None:
                return None
            if isinstance(event, JobFailed):
                raise failure_error(event)
            if isinstance(event, JobDone):
                return event
            if chunks is not None and isinstance(event, ChunkEvent):
                chunks.append(event.chunk)

    def cancel(self) -> None:
        """Any thread: stop the job (queued: skipped at once; running: within a token or batch)."""
        if not self.finished:
            self.handle.cancel()

    async def relay(self, ping_every: float) -> AsyncIterator[list[ChunkEvent | JobDone | JobFailed] | None]:
        """Inside a streaming response (which cancels this generator when the client leaves): the job's
        events up to its end, in batches of what has arrived (one socket write for a burst), and None
        whenever `ping_every` seconds pass without one (send a ping)."""
        while not self.finished:
            if self.queue.empty():
                try:
                    async with asyncio.timeout(ping_every):
                        first = await self.queue.get()
                except TimeoutError:
                    yield None
                    continue
            else:
                first = self.queue.get_nowait()
            batch: list[ChunkEvent | JobDone | JobFailed] = []
            event: HostEvent | None = first
            while event is not None:
                if isinstance(event, (ChunkEvent, JobDone, JobFailed)):
                    batch.append(event)
                    if isinstance(event, (JobDone, JobFailed)):
                        self.finished = True
                        break
                event = self.queue.get_nowait() if not self.queue.empty() else None
            if batch:
                yield batch


def failure_error(event: JobFailed) -> APIError:
    param = event.details.get("param")
    return from_failure(event.error_message, event.code, param=param if isinstance(param, str) else None)


def stream_failure(event: JobDone | JobFailed) -> dict | None:
    """The one SSE error event that ends a stream that failed after it began; None when it finished well."""
    if isinstance(event, JobFailed):
        return error_body(event.error_message, "server_error", event.code)
    final = event.result.final
    if final.finish_reason == "error":
        code = final.error_code or "engine_error"
        return error_body(final.error or "the generation failed", FAILURES.get(code, FAILURES["engine_error"])[0], code)
    if final.finish_reason == "cancelled":
        return error_body("the generation was stopped (the server is shutting down)", "unavailable_error", "cancelled")
    return None


def cancel_all(live: weakref.WeakSet[JobStream]) -> int:
    """Stop every job a request is still waiting on (server shutdown); returns how many."""
    streams = [s for s in list(live) if not s.finished]
    for s in streams:
        s.cancel()
    return len(streams)
