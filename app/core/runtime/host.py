"""The EngineHost: one named thread owns the loaded engine for the app's life; jobs in, chunks out.

Every sink is called ON THE HOST THREAD (never the submitter's): a sink must be quick and must
re-post to its own thread (Qt: emit a queued signal). `state_changed` is emitted on the host thread too.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from app.core.engines.base import Chunk, Engine, GenerateRequest, LoadSpec, ModelInfo
from app.core.engines.registry import EngineRegistry
from app.core.errors import HearthError
from app.core.events import Event
from app.core.models.calibration import CalibrationStore, SpeedRun
from app.core.runtime.jobs import (
    ChunkEvent,
    EmbedJob,
    GenerateJob,
    GenerateResult,
    HostBusy,
    HostClosed,
    HostEvent,
    HostState,
    Job,
    JobDone,
    JobFailed,
    JobHandle,
    LoadJob,
    ShutdownJob,
    Sink,
    UnloadJob,
)
from app.core.runtime.preflight import DefaultPreflight, Preflight, PreflightResult, format_for_path

logger = logging.getLogger(__name__)

# Tiny runs measure noise, not speed: only longer generations go to the calibration store.
MIN_CALIBRATION_TOKENS = 4


class EngineHost:
    def __init__(
        self,
        registry: EngineRegistry,
        *,
        queue_size: int = 8,
        preflight: Preflight | None = None,
        calibration: CalibrationStore | None = None,
        name: str = "hearth-engine",
    ) -> None:
        self.registry = registry
        self.queue_size = queue_size
        self.preflight: Preflight = preflight or DefaultPreflight()
        self.calibration = calibration
        self.state_changed: Event[HostState] = Event("host.state_changed")
        self._state = HostState()
        self._queue: collections.deque[JobHandle] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._current: JobHandle | None = None
        self._engine: Engine | None = None
        self._preflight: PreflightResult | None = None
        # A daemon only as the last resort: shutdown() is the normal exit and joins; a native call
        # that never returns must not keep the process alive after that.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- public, any thread ------------------------------------------------------------------------
    @property
    def state(self) -> HostState:
        return self._state

    @property
    def thread_name(self) -> str:
        return self._thread.name

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def submit(self, job: Job, sink: Sink | None = None) -> JobHandle:
        """Queue a job. Raises HostBusy when the queue is full, HostClosed after shutdown."""
        handle = JobHandle(job=job, sink=sink)
        with self._cond:
            if self._closed:
                raise HostClosed("the engine has shut down")
            if len(self._queue) >= self.queue_size:
                raise HostBusy(f"the engine is busy ({len(self._queue)} jobs waiting); try again shortly")
            self._queue.append(handle)
            self._cond.notify()
        return handle

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Cancel the running and queued jobs, unload, and join the thread. True if it ended in time."""
        with self._cond:
            if not self._closed:
                self._closed = True
                for h in self._queue:
                    h.cancel()
                if self._current is not None:
                    self._current.cancel()
                self._queue.append(JobHandle(job=ShutdownJob()))
                self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            # Last resort: a native call that ignores cancel must not keep the process alive.
            logger.error("engine host did not stop within %.1f s; abandoning it", timeout)
            return False
        return True

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

    def _wait(self, handle: JobHandle, timeout: float | None):
        finished = handle.wait_or_cancel(timeout)
        if not finished:
            handle.cancel()
            raise HearthError(f"the engine did not answer within {timeout:.0f} s")
        if handle.error is not None:
            raise HearthError(handle.error)
        return handle.result

    # -- host thread -------------------------------------------------------------------------------
    def _set_state(self, **changes) -> None:
        with self._cond:
            depth = len(self._queue)
        state = HostState(**{**self._state.__dict__, **changes, "queue_depth": depth})
        if state != self._state:
            self._state = state
            self.state_changed.emit(state)

    def _next(self) -> JobHandle:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            handle = self._queue.popleft()
            self._current = handle
            return handle

    def _emit(self, handle: JobHandle, event: HostEvent) -> None:
        if handle.sink is None:
            return
        try:
            handle.sink(event)
        except Exception:  # a broken sink (a client that left) cancels its own job, not the host
            logger.exception("sink of job %d failed; cancelling the job", handle.id)
            handle.cancel()

    def _finish(self, handle: JobHandle, result=None, error: str | None = None) -> None:
        handle.result, handle.error = result, error
        self._emit(handle, JobFailed(error) if error is not None else JobDone(result))
        with self._cond:
            self._current = None
        handle.done.set()

    def _run(self) -> None:
        logger.info("engine host %s started", self._thread.name)
        while True:
            handle = self._next()
            job = handle.job
            if isinstance(job, ShutdownJob):
                self._unload()
                self._finish(handle)
                break
            if handle.cancelled:
                self._finish(handle, error="cancelled before it started")
                continue
            handle.started = True
            try:
                if isinstance(job, LoadJob):
                    self._load(handle, job)
                elif isinstance(job, UnloadJob):
                    self._unload()
                    self._set_state(status="idle", model=None, source=None, error=None)
                    self._finish(handle)
                elif isinstance(job, GenerateJob):
                    self._generate(handle, job)
                elif isinstance(job, EmbedJob):
                    engine = self._require_engine()
                    self._finish(handle, engine.embed(job.texts))
                else:
                    self._finish(handle, error=f"unknown job {type(job).__name__}")
            except HearthError as exc:
                self._finish(handle, error=str(exc))
            except Exception as exc:  # the host outlives any engine bug
                logger.exception("job %d (%s) failed", handle.id, type(job).__name__)
                self._finish(handle, error=f"{type(exc).__name__}: {exc}")
        # Anything submitted after the shutdown marker is told so.
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
        for h in left:
            self._finish(h, error="the engine has shut down")
        logger.info("engine host %s stopped", self._thread.name)

    def _require_engine(self) -> Engine:
        if self._engine is None:
            raise HearthError("no model is loaded")
        return self._engine

    def _unload(self) -> None:
        engine, self._engine, self._preflight = self._engine, None, None
        if engine is not None:
            try:
                engine.unload()
            except Exception:
                logger.exception("unloading %s failed", engine.name)

    def _load(self, handle: JobHandle, job: LoadJob) -> None:
        self._unload()  # loading another model is an unload + load; frees memory before the fit check
        self._set_state(status="loading", model=None, source=None, error=None)
        path = Path(job.spec.path)
        try:
            pre = self.preflight(job.spec, job.format, job.plan_check)
            if handle.cancelled:
                raise HearthError("load cancelled")
            engine = self.registry.create(job.format)
            try:
                info = engine.load(job.spec)
            except Exception:
                try:
                    engine.unload()
                except Exception:
                    logger.debug("unload after a failed load failed too", exc_info=True)
                raise
        except HearthError as exc:
            logger.warning("could not load %s: %s", path.name, exc)
            self._set_state(status="error", model=None, error=str(exc))
            self._finish(handle, error=str(exc))
            return
        except Exception as exc:  # a native failure (T26) must leave the host alive
            logger.exception("loading %s failed", path.name)
            message = f"could not load {path.name}: {exc}"
            self._set_state(status="error", model=None, error=message)
            self._finish(handle, error=message)
            return
        self._engine, self._preflight = engine, pre
        logger.info("loaded %s with %s", path.name, engine.name)
        self._set_state(status="ready", model=info, error=None)
        self._finish(handle, info)

    def _generate(self, handle: JobHandle, job: GenerateJob) -> None:
        engine = self._require_engine()
        self._set_state(status="generating", source=job.source)
        parts: list[str] = []
        final: Chunk | None = None
        try:
            for chunk in engine.generate(job.request, handle.cancel_event):
                if chunk.text:
                    parts.append(chunk.text)
                if chunk.finish_reason is not None:
                    final = chunk
                self._emit(handle, ChunkEvent(chunk))
        except Exception as exc:
            message = str(exc) if isinstance(exc, HearthError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, HearthError):
                logger.exception("generation failed in %s", engine.name)
            self._set_state(status="ready", source=None)
            self._finish(handle, error=message)
            return
        if final is None:
            final = Chunk(finish_reason="cancelled" if handle.cancelled else "stop")
        self._set_state(status="ready", source=None)
        self._calibrate(final)
        self._finish(handle, GenerateResult(text="".join(parts), final=final))

    def _calibrate(self, final: Chunk) -> None:
        pre, stats = self._preflight, final.stats
        if self.calibration is None or pre is None or stats is None or self._engine is None:
            return
        if final.finish_reason not in ("stop", "length") or stats.generated_tokens < MIN_CALIBRATION_TOKENS:
            return
        if pre.predicted_decode_tok_s <= 0 or stats.decode_tok_s <= 0:
            return
        info = self._engine.info
        model = Path(info.path).name if info is not None else "?"
        try:
            self.calibration.record(
                SpeedRun(
                    backend=pre.backend,
                    model=model,
                    predicted_decode=pre.predicted_decode_tok_s,
                    measured_decode=stats.decode_tok_s,
                    measured_prefill=stats.prompt_tok_s,
                )
            )
        except OSError as exc:  # a read-only cache dir costs calibration, not the reply
            logger.warning("could not record the speed run: %s", exc)
        logger.debug(
            "calibration: %s predicted %.1f tok/s, measured %.1f", model, pre.predicted_decode_tok_s, stats.decode_tok_s
        )

    def __repr__(self) -> str:
        return f"EngineHost({self._thread.name!r}, {self._state.status})"
