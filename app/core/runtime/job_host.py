"""What the chat, the API and the CLI hand jobs to: one EngineHost, or the ModelPool of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.engines.base import Chunk, GenerateRequest, LoadSpec, ModelInfo
from app.core.engines.registry import EngineRegistry
from app.core.errors import HearthError
from app.core.events import Event
from app.core.models.calibration import CalibrationStore
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


@dataclass(frozen=True)
class Resident:
    """A loaded model as views show it (`ModelPool.residents()`)."""

    key: str  # the model's file (or remote pseudo-path)
    state: HostState
    memory_bytes: int  # the planner's total for its load (0: not planned, a remote model)
    pinned: bool
    ttl_s: float | None  # idle time-to-live; None: never unloaded for being idle
    idle_left_s: float | None  # until unloaded for being idle; None: not counting (busy, pinned, no ttl)
    last_used: float  # monotonic
    focus: bool  # what a job that names no model runs on

    @property
    def name(self) -> str:
        return Path(self.state.model.path).name if self.state.model is not None else Path(self.key).name


class JobHost:
    """`submit` a job, read `state`; the waiting calls below are built on those two."""

    state_changed: Event[HostState]
    registry: EngineRegistry
    calibration: CalibrationStore | None
    resolver: Any  # resolves a job's model name (a ModelResolver, or any Callable[[str], LoadJob])
    queue_size: int  # the most jobs waiting per model

    @property
    def state(self) -> HostState:
        raise NotImplementedError

    def submit(self, job: Job, sink: Sink | None = None) -> JobHandle:
        raise NotImplementedError

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Cancel every job, unload, and join the engine thread(s); True if all ended in time."""
        raise NotImplementedError

    def residents(self) -> list[Resident]:
        """The loaded models, most recently used first (a single host: the one it has)."""
        state = self.state
        if state.model is None:
            return []
        return [Resident(str(state.model.path), state, 0, False, None, None, 0.0, True)]

    def keep(self, name: str, *, ttl_s: float | None = None, pin: bool | None = None) -> bool:
        """How long a loaded model stays, and whether it is pinned; False where that cannot be changed."""
        return False

    def load_sync(
        self, spec: LoadSpec, fmt: str | None = None, *, plan_check: bool = True, timeout: float | None = 600.0
    ) -> ModelInfo:
        """Load and wait (for callers that are not Qt: the CLI, tests). Raises HearthError on failure."""
        job = LoadJob(spec=spec, format=fmt or format_for_path(spec.path), plan_check=plan_check)
        return self.wait_for(self.submit(job), timeout)

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
        result: GenerateResult = self.wait_for(handle, timeout)
        return result.text, result.final

    def wait_for(self, handle: JobHandle, timeout: float | None) -> Any:
        finished = handle.wait_or_cancel(timeout)
        if not finished:
            handle.cancel()
            raise HearthError(f"the engine did not answer within {timeout:.0f} s")
        if handle.error is not None:
            raise HearthError(handle.error)
        return handle.result
