"""The loaded models: each on an EngineHost of its own (its own thread and queue), jobs routed by the model
they name, several running at once.

A job for a model that is not loaded gets a new host (JIT, when on), which loads it when the job starts.
Before it loads, the pool makes room (residency.py): the model is planned against live free memory less
what the loaded ones hold unseen, and the least recently used unpinned models are unloaded until it fits
(or the count cap allows it). An unloaded model finishes the jobs it has in hand first. Each model has an
idle time-to-live (the Settings default, or as a job asks: Ollama's keep_alive, LM Studio's ttl) and may be
pinned. `state` is the model in focus (the last one loaded): what a caller that names no model runs on.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from pathlib import Path

from app.core.engines.base import LoadSpec
from app.core.engines.registry import EngineRegistry
from app.core.errors import HearthError
from app.core.events import Event
from app.core.formats import GGUF
from app.core.models.calibration import CalibrationStore
from app.core.models.memory import MemoryEstimate
from app.core.runtime.admission import Seat, check_reload, fit_beside, make_room
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.job_host import JobHost, Resident
from app.core.runtime.jobs import (
    HostClosed,
    HostState,
    Job,
    JobDone,
    JobFailed,
    JobHandle,
    LoadJob,
    ModelNotFound,
    ModelPinned,
    ShutdownJob,
    Sink,
    UnloadJob,
    keep_for,
)
from app.core.runtime.preflight import PreflightResult, check_model, live_machine
from app.core.runtime.residency import Holding, holding_of
from app.core.runtime.resolve import ModelResolver

logger = logging.getLogger(__name__)

REAP_POLL_S = 1.0  # how often idle times are looked at while a model is busy (its end is not announced)


class _PoolModel:
    """One resident model: its host and what the pool knows of it. Read and changed only by the pool's
    methods, under its lock (from the thread each method names)."""

    host: EngineHost  # made just after the model: the host's preflight needs the model

    def __init__(self, key: str) -> None:
        self.key = key
        self.ttl_s: float | None = None  # None: the pool's default
        self.pinned = False
        self.last_used = time.monotonic()
        # Set when admitted (ModelPool._admit): what its load was planned to hold, and how.
        self.holding: Holding | None = None
        self.estimate: MemoryEstimate | None = None
        self.mapped = False  # weights memory-mapped
        self.unified = False  # on one pool of memory (Apple)
        self.retiring = False


def _key(path: Path | str) -> str:
    try:
        return str(Path(path).expanduser().resolve())
    except OSError:
        return str(path)


class ModelPool(JobHost):
    def __init__(
        self,
        registry: EngineRegistry,
        *,
        resolver: ModelResolver | None = None,
        calibration: CalibrationStore | None = None,
        jit: bool = True,
        queue_size: int = 8,
        idle_ttl_s: float | None = None,
        max_models: int = 0,
        machine=live_machine,
        name: str = "hearth-engine",
    ) -> None:
        """`idle_ttl_s`: the default time-to-live of an idle model (None: never); `max_models`: the most
        loaded at once (0: as many as fit); `machine()`: live free memory (tests simulate one)."""
        self.registry = registry
        self.resolver = resolver
        self.calibration = calibration
        self.jit = jit  # any thread may change these two: the next job uses them
        self.max_models = max_models
        self.machine = machine
        self._queue_size = queue_size
        self._name = name
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._models: dict[str, _PoolModel] = {}
        self._focus: _PoolModel | None = None
        self._leaving: list[_PoolModel] = []  # retired, still finishing their jobs or unloading
        self._closed = False
        self.state_changed: Event[HostState] = Event("pool.state_changed")  # the focus model's state
        self.residents_changed: Event[None] = Event("pool.residents_changed")  # any model's state or keep
        self.notice: Event[str] = Event("pool.notice")  # a sentence for the user: "unloaded A to make room for B"
        self._idle_ttl_s = idle_ttl_s
        self._reaper = threading.Thread(target=self._reap, name=f"{name}-residency", daemon=True)
        self._reaper.start()
        logger.info("model pool %s started (at most %s models)", name, max_models or "as many as fit")

    # -- any thread --------------------------------------------------------------------------------
    @property
    def state(self) -> HostState:
        focus = self._focus
        return focus.host.state if focus is not None else HostState()

    @property
    def idle_ttl_s(self) -> float | None:
        """The time-to-live of an idle model that no job or load gave one (None: never unloaded)."""
        return self._idle_ttl_s

    @idle_ttl_s.setter
    def idle_ttl_s(self, ttl: float | None) -> None:
        with self._lock:
            self._idle_ttl_s = ttl
            self._wake.notify_all()

    @property
    def queue_size(self) -> int:
        return self._queue_size

    @queue_size.setter
    def queue_size(self, size: int) -> None:
        with self._lock:
            self._queue_size = size
            for model in self._models.values():
                model.host.queue_size = size

    @property
    def queue_depth(self) -> int:
        with self._lock:
            return sum(s.host.queue_depth for s in self._models.values())

    def residents(self) -> list[Resident]:
        """The loaded (and loading) models, most recently used first."""
        now = time.monotonic()
        with self._lock:
            models = sorted(self._models.values(), key=lambda s: -s.last_used)
            return [self._resident(s, now) for s in models]

    def submit(self, job: Job, sink: Sink | None = None) -> JobHandle:
        """Route `job` to the host of the model it names (a new one, JIT, if none holds it). Raises HostBusy
        when that model's queue is full, HostClosed after shutdown; a model that cannot be found fails the
        job through its sink, as a host would."""
        if isinstance(job, ShutdownJob):
            raise ValueError("shut the pool down with shutdown()")
        if isinstance(job, UnloadJob):
            return self._unload(job, sink)
        name = getattr(job, "model", None)
        try:
            key = _key(job.spec.path) if isinstance(job, LoadJob) else self._key_of(name) if name else None
            with self._lock:
                if self._closed:
                    raise HostClosed("the engine has shut down")
                model = self._model_for(key, name, isinstance(job, LoadJob))
                handle = model.host.submit(job, sink)
                self._used(model, job)
                self._wake.notify_all()
        except ModelNotFound as exc:
            return _failed(job, sink, str(exc), "model_not_found")
        self.residents_changed.emit(None)
        return handle

    def keep(self, name: str, *, ttl_s: float | None = None, pin: bool | None = None) -> bool:
        """Change how long a loaded model stays (`ttl_s` as a job's) and whether it is pinned (never
        unloaded to make room nor for being idle); False if it is not loaded."""
        try:
            key = self._key_of(name)
        except ModelNotFound:
            return False
        with self._lock:
            model = self._models.get(key)
            if model is None:
                return False
            if pin is not None:
                model.pinned = pin
            if ttl_s is not None:
                model.ttl_s = keep_for(ttl_s)
            self._wake.notify_all()
        self.residents_changed.emit(None)
        return True

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Cancel every job, unload every model and join the threads. True if all ended in time."""
        with self._lock:
            self._closed = True
            models = list(self._models.values())
            self._models.clear()
            self._focus = None
            self._wake.notify_all()
        end = time.monotonic() + timeout
        for model in models:
            model.host.close()  # all at once: each stops while the others are joined
        done = [model.host.shutdown(max(0.1, end - time.monotonic())) for model in models]
        self._reaper.join(max(0.1, end - time.monotonic()))
        logger.info("model pool %s stopped", self._name)
        return all(done)

    # -- routing (under the lock) ------------------------------------------------------------------
    def _key_of(self, name: str) -> str:
        if name in self._models:  # a loaded model's key (`Resident.key`): how views pin and unload one
            return name
        if self.resolver is None:
            # Without a library only what is loaded answers, by its file name or path.
            for model in self._models.values():
                info = model.host.state.model
                if info is not None and name in (Path(info.path).name, str(info.path)):
                    return model.key
            raise ModelNotFound(f"{name!r}: this engine runs only the models loaded in it")
        return _key(self.resolver.path_of(name))

    def _model_for(self, key: str | None, name: str | None, loading: bool) -> _PoolModel:
        if key is None:
            model = self._focus or self._latest()
            if model is None:
                raise ModelNotFound("no model is loaded")
            return model
        model = self._models.get(key)
        if model is not None:
            return model
        if not loading and not self.jit:
            raise ModelNotFound(f"{name} is not loaded; load it in Hearth, or turn on JIT loading in Settings")
        return self._new_model(key)

    def _new_model(self, key: str) -> _PoolModel:
        model = _PoolModel(key)

        def admit(spec: LoadSpec, fmt: str, plan_check: bool) -> PreflightResult:
            return self._admit(model, spec, fmt, plan_check)

        def reload_check(spec: LoadSpec, fmt: str, loaded: PreflightResult | None) -> None:
            self._check_reload(model, spec, fmt, loaded)

        model.host = EngineHost(
            self.registry,
            queue_size=self._queue_size,
            preflight=admit,
            reload_check=reload_check,
            calibration=self.calibration,
            name=self._name if not self._models else f"{self._name}-{next(self._ids)}",
            resolver=self.resolver,
            jit=True,  # the host loads its own model when its first job starts
        )
        model.host.state_changed.connect(lambda state: self._on_state(model, state))
        self._models[key] = model
        return model

    def _used(self, model: _PoolModel, job: Job) -> None:
        model.last_used = time.monotonic()
        ttl = getattr(job, "ttl_s", None)
        if ttl is not None:
            model.ttl_s = keep_for(ttl)
        if isinstance(job, LoadJob):
            if job.pin is not None:
                model.pinned = job.pin
            if job.focus:
                self._focus = model
        if self._focus is None:
            self._focus = model

    def _latest(self) -> _PoolModel | None:
        return max(self._models.values(), key=lambda s: s.last_used, default=None)

    def _others(self, model: _PoolModel) -> list[_PoolModel]:
        """Under the lock: the models that stay beside `model` (neither it nor one being unloaded)."""
        return [s for s in self._models.values() if s is not model and not s.retiring]

    def _seats(self, model: _PoolModel) -> list[Seat]:
        """Under the lock: the models beside `model`, as admission decides from them."""
        return [
            Seat(Path(s.key).name, s.key, s.pinned, s.host.state.model is not None, s.last_used, s.holding)
            for s in self._others(model)
        ]

    def retire(self, model: _PoolModel, why: str) -> None:
        """Under the lock: unload `model` once its jobs in hand are done; jobs from now on go to a new host."""
        if model.retiring:
            return
        model.retiring = True
        if self._models.get(model.key) is model:
            del self._models[model.key]
        self._leaving = [s for s in self._leaving if s.host.thread_alive()] + [model]
        logger.info("unloading %s: %s", Path(model.key).name, why)
        model.host.retire()
        if self._focus is model:
            self._focus = self._latest()
            # Views follow the model now in focus (or none) at once, not when the old one is gone.
            self.state_changed.emit(self._focus.host.state if self._focus is not None else HostState())

    def _unload(self, job: UnloadJob, sink: Sink | None) -> JobHandle:
        try:
            with self._lock:
                if job.every:
                    models = list(self._models.values())
                elif job.model is not None:
                    model = self._models.get(self._key_of(job.model))
                    if model is None:
                        raise ModelNotFound(f"{job.model} is not loaded")
                    models = [model]
                else:
                    models = [self._focus] if self._focus is not None else []
                pinned = [Path(s.key).name for s in models if s.pinned]
                if pinned and not job.even_pinned:
                    raise ModelPinned(
                        f"{', '.join(pinned)} {'is' if len(pinned) == 1 else 'are'} pinned in Hearth and stays "
                        'loaded; unpin it first (POST /models/load with "pin": false, or in the app)'
                    )
                for model in models:
                    self.retire(model, "asked to")
        except ModelNotFound as exc:
            return _failed(job, sink, str(exc), "model_not_found")
        except ModelPinned as exc:
            return _failed(job, sink, str(exc), ModelPinned.code)
        handle = JobHandle(job=job, sink=sink)

        def finish() -> None:
            for model in models:
                model.host.join()
            handle.result = None
            if sink is not None:
                sink(JobDone(None))
            handle.done.set()

        threading.Thread(target=finish, name=f"{self._name}-unload", daemon=True).start()
        self.residents_changed.emit(None)
        return handle

    # -- host threads ------------------------------------------------------------------------------
    def _admit(self, entry: _PoolModel, spec: LoadSpec, fmt: str, plan_check: bool) -> PreflightResult:
        """On `entry`'s host thread, as its preflight, before native code sees the model: validate the file,
        unload what admission.make_room picks and reserve what this one will hold (so an admission running
        next counts it), wait for the unloaded models to be gone, then check the fit against live memory as
        a single load would, with what the models that stay hold unseen taken off."""
        path = Path(spec.path).expanduser()
        with self._lock:
            if entry.retiring:  # a job left in the hand of a model being unloaded does not load it again
                raise HearthError(f"{path.name} is being unloaded; ask again to load it anew")
        model = check_model(path, fmt)
        with self._lock:
            entry.mapped = fmt == GGUF and spec.use_mmap
            machine = self.machine() if model is not None and plan_check else None
            room = make_room(model, spec, path.name, self._seats(entry), machine, self.max_models)
            victims = [self._models[key] for key in room.unload]
            for victim in victims:
                self.retire(victim, f"to make room for {path.name}")
                self.notice.emit(f"Unloaded {Path(victim.key).name} to make room for {path.name}")
            if room.estimate is not None:
                entry.estimate, entry.unified = room.estimate, room.unified
            entry.holding = holding_of(entry.estimate, mapped=entry.mapped, loaded=False)
            leaving = [s for s in self._leaving if s is not entry]
        if victims:
            logger.info("unloading %s to make room for %s", ", ".join(Path(v.key).name for v in victims), path.name)
        for gone in leaving:  # those just picked, and any other still unloading: their memory comes back
            gone.host.join()
        if model is None:
            return PreflightResult()  # plug-in formats validate themselves and plan nothing
        if not plan_check:
            return PreflightResult(spec=model)
        with self._lock:
            kept, machine = self._seats(entry), self.machine()
        result = fit_beside(model, spec, path.name, kept, machine)
        if result.plan is not None:
            with self._lock:
                entry.estimate = result.plan.estimate
        return result

    def _check_reload(self, entry: _PoolModel, spec: LoadSpec, fmt: str, loaded: PreflightResult | None) -> None:
        """On `entry`'s host thread, before its loaded model is let go for a new load of itself: refuse one
        that cannot fit even with this model and every unpinned one beside it unloaded, or that the cap on
        loaded models has no room for. Nothing is unloaded or reserved here; the load's own admission then
        picks what to unload, as for any load."""
        path = Path(spec.path).expanduser()
        # The file the loaded model was checked from: its spec, not a second read of its header.
        model = loaded.spec if loaded is not None and loaded.spec is not None else check_model(path, fmt)
        if model is None:
            return
        with self._lock:
            seats, own, machine = self._seats(entry), entry.holding, self.machine()
        check_reload(model, spec, path.name, seats, own, machine)

    def _on_state(self, model: _PoolModel, state: HostState) -> None:
        """On `model`'s host thread: keep what it holds current, drop it after a failed load, pass it on."""
        with self._lock:
            if state.model is not None and model.holding is not None:
                model.holding = holding_of(model.estimate, mapped=model.mapped, loaded=True, unified=model.unified)
            if state.status == "error" and state.model is None:
                self.retire(model, "its load failed")
            focus = self._focus is model
            self._wake.notify_all()
        if focus:
            self.state_changed.emit(state)
        self.residents_changed.emit(None)

    def _reap(self) -> None:
        """The residency thread: unload models idle past their time-to-live."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                wait: float | None = None
                for model in list(self._models.values()):
                    left, busy = self._idle_left(model, now)
                    if busy:
                        wait = min(wait or REAP_POLL_S, REAP_POLL_S)
                    elif left is not None and left <= 0:
                        self.retire(model, "idle past its time-to-live")
                        self.notice.emit(f"Unloaded {Path(model.key).name}: idle past its time-to-live")
                        self.residents_changed.emit(None)
                    elif left is not None:
                        wait = left if wait is None else min(wait, left)
                self._wake.wait(wait)

    def _ttl(self, model: _PoolModel) -> float | None:
        ttl = self.idle_ttl_s if model.ttl_s is None else model.ttl_s
        return None if ttl is None or math.isinf(ttl) or model.pinned else ttl

    def _idle_left(self, model: _PoolModel, now: float) -> tuple[float | None, bool]:
        """(seconds until `model` is unloaded for being idle or None, whether it is busy now)."""
        ttl = self._ttl(model)
        if ttl is None:
            return None, False
        since = model.host.idle_since()
        if since is None or model.host.state.status in ("loading", "generating"):
            return None, True
        return max(since, model.last_used) + ttl - now, False

    def _resident(self, model: _PoolModel, now: float) -> Resident:
        left, _ = self._idle_left(model, now)
        return Resident(
            key=model.key,
            state=model.host.state,
            memory_bytes=model.holding.total if model.holding is not None else 0,
            pinned=model.pinned,
            ttl_s=self._ttl(model),
            idle_left_s=None if left is None else max(0.0, left),
            last_used=model.last_used,
            focus=model is self._focus,
        )

    def __repr__(self) -> str:
        return f"ModelPool({len(self._models)} loaded)"


def _failed(job: Job, sink: Sink | None, message: str, code: str) -> JobHandle:
    """A job that fails before any host takes it, told through its sink as a host would."""
    handle = JobHandle(job=job, sink=sink)
    handle.error, handle.error_code = message, code
    if sink is not None:
        sink(JobFailed(message, code))
    handle.done.set()
    return handle
