"""The EngineHost: one named thread owns the loaded engine for the app's life; jobs in, chunks out.

Every sink is called ON THE HOST THREAD (never the submitter's): a sink must be quick and must
re-post to its own thread (Qt: emit a queued signal). `state_changed` is emitted on the host thread too.

Chat and API share this one host and its one bounded FIFO queue. A job may name the model it is for:
the host checks that model when the job starts and loads it first when another (or none) is loaded and
JIT loading is on, so a job never runs on a model that was swapped in while it waited.

An engine loaded with slots runs several generations at once (app.core.runtime.generation_loop): jobs for the
loaded model join the running ones between decode steps, and the queue holds only what exceeds the slots.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.core.engines.base import Chunk, Engine, ModelInfo
from app.core.engines.decoding.sequences import runner_of
from app.core.engines.registry import EngineRegistry
from app.core.errors import HearthError
from app.core.events import Event
from app.core.models.calibration import CalibrationStore
from app.core.runtime.calibrate import record_run
from app.core.runtime.generation_loop import GenerationLoop
from app.core.runtime.job_host import JobHost
from app.core.runtime.job_queue import JobQueue
from app.core.runtime.jobs import (
    CountJob,
    EmbedJob,
    GenerateJob,
    HostEvent,
    HostState,
    Job,
    JobDone,
    JobFailed,
    JobHandle,
    LoadJob,
    ModelNotFound,
    RerankJob,
    ShutdownJob,
    Sink,
    TokenCount,
    UnloadJob,
    failure_code,
    same_path,
)
from app.core.runtime.preflight import DefaultPreflight, LoadRefused, Preflight, PreflightResult, ReloadCheck

logger = logging.getLogger(__name__)

# A load that may grow (an API load below its largest context) grows for a request whose prompt and reply do
# not fit: by this room for a reply when the request bounds none, in steps of GROW_STEP tokens.
GROW_REPLY_ROOM = 2048
GROW_STEP = 4096

# The engine thread's stack, the same on every OS (threads get 8 MiB on Linux, 512 KiB on macOS, 1 MiB on
# Windows): llama.cpp's grammar parser recurses once per nesting level of a grammar, and the deepest one
# Hearth lets through (tools.schema_grammar.MAX_GRAMMAR_NESTING) parses in a sixteenth of this.
ENGINE_STACK_BYTES = 32 * 1024 * 1024
_STACK_SIZE = threading.Lock()


def start_with_stack(thread: threading.Thread, size: int) -> None:
    """Start `thread` with a `size`-byte stack; threading.stack_size is process-wide, so it is set only
    around this start and put back."""
    with _STACK_SIZE:
        before = threading.stack_size(size)
        try:
            thread.start()
        finally:
            threading.stack_size(before)


# Resolves a job's model name to the load that provides it; raises ModelNotFound.
Resolver = Callable[[str], LoadJob]


def loaded_slots(engine: Engine) -> int:
    """Generations `engine` runs at once: its batched runner's slots, else one."""
    runner = engine.sequences
    if runner is not None:
        return max(1, runner.free_slots() + runner.active())
    return 1


class EngineHost(JobHost):
    def __init__(
        self,
        registry: EngineRegistry,
        *,
        queue_size: int = 8,
        preflight: Preflight | None = None,
        reload_check: ReloadCheck | None = None,
        calibration: CalibrationStore | None = None,
        name: str = "hearth-engine",
        resolver: Resolver | None = None,
        jit: bool = True,
        idle_ttl_s: float | None = None,
    ) -> None:
        self.registry = registry
        self._jobs = JobQueue(queue_size)
        default = DefaultPreflight()
        self.preflight: Preflight = preflight or default
        # What a new load of the loaded model is checked with before it is let go (None: nothing; then a
        # reload that does not fit is refused after the unload, and the model loaded back as it was).
        self.reload_check = reload_check or (default.check_reload if preflight is None else None)
        self.calibration = calibration
        self.resolver = resolver
        self.jit = jit  # load the model a job names when another is loaded (any thread may change it)
        self.idle_ttl_s = idle_ttl_s  # unload after this long without a job; None: never
        self.state_changed: Event[HostState] = Event("host.state_changed")
        self._state = HostState()
        self._engine: Engine | None = None
        self._preflight: PreflightResult | None = None
        self._loaded: LoadJob | None = None  # the load in memory (with _engine): what a failed reload restores
        self._last_job_end = time.monotonic()
        # A daemon only as the last resort: shutdown() is the normal exit and joins; a native call
        # that never returns must not keep the process alive after that.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        start_with_stack(self._thread, ENGINE_STACK_BYTES)

    # -- public, any thread ------------------------------------------------------------------------
    @property
    def state(self) -> HostState:
        return self._state

    @property
    def thread_name(self) -> str:
        return self._thread.name

    @property
    def queue_size(self) -> int:
        return self._jobs.size

    @queue_size.setter
    def queue_size(self, size: int) -> None:
        self._jobs.size = size

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not counting the one running, nor those cancelled while they waited)."""
        return self._jobs.waiting()

    def submit(self, job: Job, sink: Sink | None = None) -> JobHandle:
        """Queue a job. Raises HostBusy (with the seconds to wait) when the queue is full, HostClosed
        after shutdown. A job cancelled while it waits no longer takes a place in the queue."""
        handle = JobHandle(job=job, sink=sink)
        self._jobs.put(handle)
        return handle

    def close(self) -> None:
        """Any thread: cancel the running and queued jobs, then unload and stop; `join` waits for it."""
        self._jobs.close(JobHandle(job=ShutdownJob()))

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Cancel the running and queued jobs, unload, and join the thread. True if it ended in time."""
        self.close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            # Last resort: a native call that ignores cancel must not keep the process alive.
            logger.error("engine host did not stop within %.1f s; abandoning it", timeout)
            return False
        return True

    def retire(self) -> None:
        """Any thread: take no more jobs, run those in hand to their end, then unload and stop (the pool
        unloading a model it makes room without). `join` waits for it."""
        self._jobs.close(JobHandle(job=ShutdownJob()), cancel=False)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (after `retire` or `shutdown`); True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def thread_alive(self) -> bool:
        return self._thread.is_alive()

    def idle_since(self) -> float | None:
        """Any thread: the monotonic time the last job ended, if no job runs or waits now (else None)."""
        return None if self._jobs.busy() else self._last_job_end

    # -- host thread: the host's own steps, which the generation loop (generation_loop.py) takes too --
    @property
    def jobs(self) -> JobQueue:
        return self._jobs

    def set_state(self, **changes) -> None:
        if "model" in changes and changes["model"] is None:
            changes.setdefault("load", None)  # no model, no load
            changes.setdefault("grow_to", 0)
        state = HostState(**{**self._state.__dict__, **changes, "queue_depth": self._jobs.waiting()})
        if state != self._state:
            decoding_changed = (state.status == "generating") != (self._state.status == "generating")
            self._state = state  # first: a waiter woken by its job's end reads the new state at once
            if decoding_changed:
                self._mark_native(state.status == "generating")
            self.state_changed.emit(state)

    def _mark_native(self, decoding: bool) -> None:
        """Mark a decode run in flight (or over) for the engine's crash attribution; a marker costs one small
        file write per run, never per token."""
        activity = self._engine.native_activity if self._engine is not None else None
        if activity is None:
            return
        if decoding:
            activity.begin("decoding")
        else:
            activity.end()

    def _idle_left(self) -> float | None:
        if self.idle_ttl_s is None or self._engine is None:
            return None
        return max(0.0, self._last_job_end + self.idle_ttl_s - time.monotonic())

    def emit(self, handle: JobHandle, event: HostEvent) -> None:
        if handle.sink is None:
            return
        try:
            handle.sink(event)
        except Exception:  # a broken sink (a client that left) cancels its own job, not the host
            logger.exception("sink of job %d failed; cancelling the job", handle.id)
            handle.cancel()

    def finish(self, handle: JobHandle, result=None) -> None:
        handle.result = result
        self.emit(handle, JobDone(result))
        self._ended(handle)

    def fail(self, handle: JobHandle, message: str, code: str = "engine_error", details: dict | None = None) -> None:
        handle.error, handle.error_code = message, code
        self.emit(handle, JobFailed(message, code, dict(details or {}), handle.output_started))
        self._ended(handle)

    def fail_with(self, handle: JobHandle, exc: BaseException) -> None:
        message = str(exc) if isinstance(exc, HearthError) else f"{type(exc).__name__}: {exc}"
        self.fail(handle, message, failure_code(exc), getattr(exc, "details", None))

    def _ended(self, handle: JobHandle) -> None:
        self._last_job_end = time.monotonic()  # first: idle_since never pairs "not busy" with an old end
        self._jobs.ended(handle)
        handle.done.set()

    def _run(self) -> None:
        logger.info("engine host %s started", self._thread.name)
        while True:
            handle = self._jobs.take(self._idle_left)  # None: idle for the time-to-live
            if handle is None:
                self._idle_unload()
                continue
            job = handle.job
            if isinstance(job, ShutdownJob):
                self._unload()
                self.set_state(status="idle", model=None, source=None, error=None, slots_total=0, slots_busy=0)
                self.finish(handle)
                break
            if handle.cancelled:
                self.fail(handle, "cancelled before it started", "cancelled")
                continue
            handle.started = True
            began = time.monotonic()
            try:
                self.dispatch(handle, job)
            except Exception as exc:  # the host outlives any engine bug
                if not isinstance(exc, HearthError):
                    logger.exception("job %d (%s) failed", handle.id, type(job).__name__)
                self.fail_with(handle, exc)
            self._jobs.took(time.monotonic() - began)
        # Anything submitted after the shutdown marker is told so.
        for h in self._jobs.drain():
            self.fail(h, "the engine has shut down", "unavailable")
        logger.info("engine host %s stopped", self._thread.name)

    def dispatch(self, handle: JobHandle, job: Job) -> None:
        if isinstance(job, LoadJob):
            self._load(handle, job)
        elif isinstance(job, UnloadJob):
            self._unload()
            self.set_state(status="idle", model=None, source=None, error=None, slots_total=0, slots_busy=0)
            self.finish(handle)
        elif isinstance(job, GenerateJob):
            self._generate(handle, job)
        elif isinstance(job, CountJob):
            engine = self._engine_for(job.model, handle)
            info = engine.info
            request = job.prepare(info, engine.capabilities) if job.prepare is not None and info else job.request
            self.finish(handle, TokenCount(engine.count_tokens(request), info.n_ctx if info else 0))
        elif isinstance(job, EmbedJob):
            # Cancel is checked between inputs: a client that left frees the host within one input's decode.
            self.finish(handle, self._engine_for(job.model, handle).embed(job.texts, handle.cancel_event))
        elif isinstance(job, RerankJob):
            # As an embed job: cancel is checked between documents, one pair's decode apart.
            engine = self._engine_for(job.model, handle)
            self.finish(handle, engine.rerank(job.query, job.documents, handle.cancel_event))
        else:
            self.fail(handle, f"unknown job {type(job).__name__}")

    def _idle_unload(self) -> None:
        if self._engine is not None:
            logger.info("no job for %.0f s: unloading the model", self.idle_ttl_s or 0)
            self._unload()
            self.set_state(status="idle", model=None, source=None, error=None, slots_total=0, slots_busy=0)

    def _require_engine(self) -> Engine:
        if self._engine is None:
            raise ModelNotFound("no model is loaded")
        return self._engine

    def _engine_for(self, model: str | None, handle: JobHandle) -> Engine:
        """The engine to run a job for `model` on: the loaded one if it is that model, else (JIT) that
        model loaded now. Checked as the job starts, never earlier."""
        if model is None:
            return self._require_engine()
        if self.resolver is None:
            raise ModelNotFound(f"{model!r}: this host runs only the model loaded in it")
        target = self.resolver(model)
        loaded = self._engine.info if self._engine is not None else None
        if loaded is not None and same_path(loaded.path, target.spec.path):
            return self._require_engine()
        if not self.jit:
            raise ModelNotFound(f"{model} is not loaded; load it in Hearth, or turn on JIT loading in Settings")
        logger.info("loading %s for job %d (JIT)", model, handle.id)
        self._load_model(target, handle)
        return self._require_engine()

    def _unload(self) -> None:
        engine, self._engine, self._preflight, self._loaded = self._engine, None, None, None
        if engine is not None:
            try:
                engine.unload()
            except Exception:
                logger.exception("unloading %s failed", engine.name)

    def _load(self, handle: JobHandle, job: LoadJob) -> None:
        self.finish(handle, self._load_model(job, handle))

    def _load_model(self, job: LoadJob, handle: JobHandle) -> ModelInfo:
        """Unload, check and load; raises HearthError (the host state says what went wrong).

        A new load of the model loaded now (another context, batch or cache: a request's num_ctx, LM Studio's
        load options) is a reload: it is planned before the loaded model is let go, so a refusal leaves it
        as it was, and a reload that fails anyway loads it back as it was, pin and all."""
        before = self._loaded
        reload = before is not None and same_path(before.spec.path, job.spec.path)
        if reload and job.plan_check and self.reload_check is not None:
            self.reload_check(job.spec, job.format, self._preflight)  # raises LoadRefused, having changed nothing
        self._unload()  # loading another model is an unload + load; frees memory before the fit check
        self.set_state(status="loading", model=None, source=None, error=None, slots_total=0, slots_busy=0)
        try:
            return self._load_now(job, handle)
        except HearthError as exc:
            if reload and before is not None and self._restore(before, exc):
                raise
            self.set_state(status="error", model=None, error=str(exc))
            raise

    def _load_now(self, job: LoadJob, handle: JobHandle | None) -> ModelInfo:
        """Check and load `job` with nothing loaded; the state is left as "loading" on failure."""
        path = Path(job.spec.path)
        try:
            pre = self.preflight(job.spec, job.format, job.plan_check)
            if handle is not None and handle.cancelled:
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
            raise
        except Exception as exc:  # a native failure (T26) must leave the host alive
            logger.exception("loading %s failed", path.name)
            raise HearthError(f"could not load {path.name}: {exc}") from exc
        self._engine, self._preflight, self._loaded = engine, pre, job
        logger.info("loaded %s with %s", path.name, engine.name)
        self.set_state(
            status="ready", model=info, load=job.spec, grow_to=job.grow_to, error=None, slots_total=loaded_slots(engine)
        )
        return info

    def _restore(self, before: LoadJob, failure: HearthError) -> bool:
        """After a failed reload: load the model back as it was. True if it is; the failure's message then
        says so (the caller raises it)."""
        try:
            info = self._load_now(before, None)
        except HearthError as exc:
            logger.warning("could not load %s back as it was: %s", Path(before.spec.path).name, exc)
            return False
        failure.args = (f"{failure}\n{Path(info.path).name} stays loaded as it was (context {info.n_ctx:,}).",)
        return True

    def _generate(self, handle: JobHandle, job: GenerateJob) -> None:
        """Every engine runs through the one loop: a batched one with its slots, any other as one stream."""
        engine = self._engine_for(job.model, handle)
        if self.must_grow(handle, job):
            engine = self._grow(handle)
        GenerationLoop(self, engine, runner_of(engine)).run(handle, job)

    def must_grow(self, handle: JobHandle, job: GenerateJob) -> bool:
        """Host thread: whether `job` needs more context than is loaded, and the load may grow for it. Its
        prompt is counted only where the load can grow (an API load below its largest context), once."""
        loaded, engine = self._loaded, self._engine
        if loaded is None or engine is None or engine.info is None or loaded.grow_to <= loaded.spec.n_ctx:
            return False
        if handle.context_needed is None:
            request = job.prepare(engine.info, engine.capabilities) if job.prepare is not None else job.request
            try:
                prompt = engine.count_tokens(request)
            except HearthError:
                prompt = 0  # the job fails as it starts, with its own reason
            handle.prompt_tokens = prompt
            handle.context_needed = prompt + (request.sampling.max_tokens or GROW_REPLY_ROOM)
        return handle.context_needed > loaded.spec.n_ctx

    def _grow(self, handle: JobHandle) -> Engine:
        """Reload the model with the context `handle` needs (at least double what it had, rounded up, at most
        its load's ceiling), planned like any load: the first context and slot count that fits, else it
        stays as it is and the job runs there if its prompt fits (its reply may be cut short), and is refused
        with the planner's reasons (LoadRefused, a 400) if it does not."""
        loaded = self._loaded
        assert loaded is not None and handle.context_needed is not None
        needed = min(loaded.grow_to, -(-handle.context_needed // GROW_STEP) * GROW_STEP)
        refusal: HearthError | None = None
        sizes = sorted({min(loaded.grow_to, max(needed, 2 * loaded.spec.n_ctx)), needed}, reverse=True)
        for n_ctx in sizes:
            for slots in range(loaded.spec.slots, 0, -1):
                spec = loaded.spec.model_copy(update={"n_ctx": n_ctx, "slots": slots})
                if slots == 1:
                    spec = spec.model_copy(update={"kv_unified": False})
                try:  # a reload: checked before the model is let go, so a size that cannot fit costs no reload
                    logger.info("growing %s to %d tokens of context for job %d", spec.path.name, n_ctx, handle.id)
                    self._load_model(dataclasses.replace(loaded, spec=spec), handle)
                except HearthError as exc:
                    logger.info("%s cannot grow to %d tokens × %d slots: %s", spec.path.name, n_ctx, slots, exc)
                    refusal = exc
                    continue
                return self._require_engine()
        if refusal is not None and (handle.prompt_tokens or 0) >= loaded.spec.n_ctx:
            raise LoadRefused(
                f"the prompt has {handle.prompt_tokens:,} tokens and {loaded.spec.path.name} holds "
                f"{loaded.spec.n_ctx:,}; it cannot grow to {needed:,}: {refusal}"
            )
        return self._require_engine()

    def calibrate(self, final: Chunk) -> None:
        if self.calibration is not None and self._engine is not None:
            record_run(self.calibration, self._preflight, self._engine.info, final)

    def __repr__(self) -> str:
        return f"EngineHost({self._thread.name!r}, {self._state.status})"
