"""What the chat, the API and the CLI hand jobs to: one EngineHost, or the ModelPool of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.engines.base import Chunk, GenerateRequest, LoadSpec, ModelInfo
from app.core.errors import HearthError
from app.core.events import Event
from app.core.runtime.jobs import (
    ChunkEvent,
    GenerateJob,
    GenerateResult,
    HostEvent,
    HostState,
    Job,
    JobHandle,
    LoadJob,
    Sink,
)
from app.core.runtime.preflight import format_for_path


class JobHost:
    """`submit` a job, read `state`; the waiting calls below are built on those two."""

    state_changed: Event[HostState]

    @property
    def state(self) -> HostState:
        raise NotImplementedError

    def submit(self, job: Job, sink: Sink | None = None) -> JobHandle:
        raise NotImplementedError

    def load_sync(
        self, spec: LoadSpec, fmt: str | None = None, *, plan_check: bool = True, timeout: float | None = 600.0
    ) -> ModelInfo:
        """Load and wait (for callers that are not Qt: the CLI, tests). Raises HearthError on failure."""
        job = LoadJob(spec=spec, format=fmt or format_for_path(spec.path), plan_check=plan_check)
        return self._wait(self.submit(job), timeout)

    def generate_sync(
        self,
        request: GenerateRequest,
        source: str = "cli",
        on_chunk: Callable[[Chunk], None] | None = None,
        timeout: float | None = 600.0,
    ) -> tuple[str, Chunk]:
        """Generate and wait; `on_chunk` runs on the host thread. Ctrl-C while waiting cancels the job."""

        def sink(event: HostEvent) -> None:
            if on_chunk is not None and isinstance(event, ChunkEvent):
                on_chunk(event.chunk)

        handle = self.submit(GenerateJob(request=request, source=source), sink)
        result: GenerateResult = self._wait(handle, timeout)
        return result.text, result.final

    def _wait(self, handle: JobHandle, timeout: float | None) -> Any:
        finished = handle.wait_or_cancel(timeout)
        if not finished:
            handle.cancel()
            raise HearthError(f"the engine did not answer within {timeout:.0f} s")
        if handle.error is not None:
            raise HearthError(handle.error)
        return handle.result
