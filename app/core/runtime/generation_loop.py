"""The host's one generation loop, for every engine: generation jobs as sequences that share each decode
step (an engine that runs one stream at a time has one slot: engines.decoding.sequences.OneStream).

Runs on the host thread while at least one sequence is live. Between steps it takes the next queued job
when it can run now: a generation for the loaded model that the runner can admit (a slot is free, and it
is not a job the engine runs alone while others run), or a token count or an
embedding (quick, and on the same model). Anything else (a load, another model's job) waits at the head
of the queue, and nothing jumps it, until the running sequences have finished: FIFO with no starvation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.engines.base import Chunk, Engine, SequenceRunner
from app.core.engines.errors import Unsupported
from app.core.errors import HearthError
from app.core.runtime.job_queue import JobQueue
from app.core.runtime.jobs import (
    ChunkEvent,
    CountJob,
    EmbedJob,
    GenerateJob,
    GenerateResult,
    HostEvent,
    JobHandle,
    LoadJob,
    RerankJob,
    Started,
    same_path,
)

logger = logging.getLogger(__name__)


class Host(Protocol):
    """What the loop needs of the EngineHost that runs it (the host's own thread, its own queue)."""

    @property
    def jobs(self) -> JobQueue: ...

    resolver: Callable[[str], LoadJob] | None

    def dispatch(self, handle: JobHandle, job: Any) -> None: ...
    def emit(self, handle: JobHandle, event: HostEvent) -> None: ...
    def finish(self, handle: JobHandle, result: Any = None) -> None: ...
    def fail(self, handle: JobHandle, message: str, code: str = ..., details: dict | None = None) -> None: ...
    def fail_with(self, handle: JobHandle, exc: BaseException) -> None: ...
    def set_state(self, **changes: Any) -> None: ...
    def calibrate(self, final: Chunk) -> None: ...
    def must_grow(self, handle: JobHandle, job: GenerateJob) -> bool: ...


@dataclass
class _Live:
    handle: JobHandle
    source: str
    began: float = field(default_factory=time.monotonic)
    parts: list[str] = field(default_factory=list)


class GenerationLoop:
    def __init__(self, host: Host, engine: Engine, runner: SequenceRunner) -> None:
        self.host = host
        self.engine = engine
        self.runner = runner
        self.live: dict[object, _Live] = {}
        self._first: JobHandle | None = None

    def run(self, first: JobHandle, job: GenerateJob) -> None:
        self._first = first  # the host times this one itself: the whole loop is its dispatch
        self._admit(first, job)
        while self.live:
            self._take_joiners()
            self.host.set_state()  # the queue's depth, as jobs arrive during the stream
            try:
                produced = self.runner.step()
            except Exception as exc:  # a native failure: end every live sequence, keep the host
                if not isinstance(exc, HearthError):
                    logger.exception("a generation step failed")
                for live in list(self.live.values()):
                    self.host.fail_with(live.handle, exc)
                self.live.clear()
                break
            for key, chunk in produced:
                self._deliver(key, chunk)
        self.host.set_state(status="ready", source=None, slots_busy=0)

    # -- joining ---------------------------------------------------------------------------------

    def _take_joiners(self) -> None:
        jobs = self.host.jobs
        while True:
            handle = jobs.take_if(self._can_join)
            if handle is None:
                return
            if handle.cancelled:
                self.host.fail(handle, "cancelled before it started", "cancelled")
                continue
            handle.started = True
            job = handle.job
            began = time.monotonic()
            try:
                if isinstance(job, GenerateJob):
                    self._admit(handle, job)
                else:
                    self.host.dispatch(handle, job)  # a count, an embedding or a rerank, between two steps
            except Exception as exc:
                if not isinstance(exc, HearthError):
                    logger.exception("job %d (%s) failed", handle.id, type(job).__name__)
                self.host.fail_with(handle, exc)
            if not isinstance(job, GenerateJob):
                jobs.took(time.monotonic() - began)

    def _can_join(self, handle: JobHandle) -> bool:
        job = handle.job
        if isinstance(job, GenerateJob):
            # One that needs the load grown waits for the streams to end (the host grows it between jobs).
            admit = self.runner.can_admit(job.request) and self._same_model(job.model)
            return admit and not self.host.must_grow(handle, job)
        if isinstance(job, CountJob | EmbedJob | RerankJob):
            return self._same_model(job.model)
        return False

    def _same_model(self, model: str | None) -> bool:
        if model is None:
            return True
        host = self.host
        if host.resolver is None or self.engine.info is None:
            return True  # it fails as it starts, as it would alone
        try:
            target = host.resolver(model)
        except HearthError:
            return True  # an unknown model: fail it now rather than after the others
        return same_path(self.engine.info.path, target.spec.path)

    def _admit(self, handle: JobHandle, job: GenerateJob) -> None:
        """Start a generation in a free slot; a request problem fails only this job."""
        host, engine = self.host, self.engine
        try:
            request = job.request
            if job.prepare is not None and engine.info is not None:
                request = job.prepare(engine.info, engine.capabilities)
            if request.sampling.logprobs is not None and not engine.capabilities.logprobs:
                raise Unsupported(f"the {engine.name} engine does not report logprobs")
            key = self.runner.admit(request, handle.cancel_event)
        except Exception as exc:
            if not isinstance(exc, HearthError):
                logger.exception("generation failed in %s", engine.name)
            host.fail_with(handle, exc)
            return
        self.live[key] = _Live(handle, job.source)
        host.set_state(status="generating", source=job.source, slots_busy=len(self.live))
        if engine.info is not None:
            host.emit(handle, Started(engine.info))

    # -- output ----------------------------------------------------------------------------------

    def _deliver(self, key: object, chunk: Chunk) -> None:
        live = self.live.get(key)
        if live is None:
            return
        if chunk.text:
            live.parts.append(chunk.text)
            live.handle.output_started = True
        self.host.emit(live.handle, ChunkEvent(chunk))
        if chunk.finish_reason is None:
            return
        del self.live[key]
        if self.live:
            self.host.set_state(slots_busy=len(self.live))
        else:  # before the job's end is told: its waiter reads the host ready (a joiner makes it generating again)
            self.host.set_state(status="ready", source=None, slots_busy=0)
        if not self.runner.shared(key):
            self.host.calibrate(chunk)  # only a stream that ran alone measures single-stream speed
        if live.handle is not self._first:
            self.host.jobs.took(time.monotonic() - live.began)
        self.host.finish(live.handle, GenerateResult(text="".join(live.parts), final=chunk))
        if self.live:
            latest = max(self.live.values(), key=lambda v: v.began)
            self.host.set_state(status="generating", source=latest.source)
