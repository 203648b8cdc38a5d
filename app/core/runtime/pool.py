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

from app.core.engines.registry import EngineRegistry
from app.core.events import Event
from app.core.models.calibration import CalibrationStore
from app.core.models.memory import MemoryEstimate
from app.core.runtime.admission import PoolPreflight, loaded_holding
from app.core.runtime.host import EngineHost
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
from app.core.runtime.preflight import live_machine
from app.core.runtime.residency import Holding
from app.core.runtime.resolve import ModelResolver

logger = logging.getLogger(__name__)

REAP_POLL_S = 1.0  # how often idle times are looked at while a model is busy (its end is not announced)


class _Slot:
    """One resident model: its host and what the pool knows of it. Changed under the pool's lock."""

    host: EngineHost  # made just after the slot: the host's preflight needs the slot

    def __init__(self, key: str) -> None:
        self.key = key
        self.ttl_s: float | None = None  # None: the pool's default
        self.pinned = False
        self.last_used = time.monotonic()
        # Set when admitted (admission.py): what its load was planned to hold, and how.
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
        self._slots: dict[str, _Slot] = {}
        self._focus: _Slot | None = None
        self._leaving: list[_Slot] = []  # retired, still finishing their jobs or unloading
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
            for slot in self._slots.values():
                slot.host.queue_size = size

    @property
    def queue_depth(self) -> int:
        with self._lock:
            return sum(s.host.queue_depth for s in self._slots.values())

    @property
    def lock(self) -> threading.RLock:
        """Held while the models are looked at or changed (admission.py takes it to make room)."""
        return self._lock

    def others(self, slot: _Slot) -> list[_Slot]:
        """Under the lock: the models that stay beside `slot` (neither it nor one being unloaded)."""
        return [s for s in self._slots.values() if s is not slot and not s.retiring]

    def leaving(self, slot: _Slot) -> list[_Slot]:
        """Under the lock: the models being unloaded (finishing their jobs or unloading), but `slot`."""
        return [s for s in self._leaving if s is not slot]

    def residents(self) -> list[Resident]:
        """The loaded (and loading) models, most recently used first."""
        now = time.monotonic()
        with self._lock:
            slots = sorted(self._slots.values(), key=lambda s: -s.last_used)
            return [self._resident(s, now) for s in slots]

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
                slot = self._slot_for(key, name, isinstance(job, LoadJob))
                handle = slot.host.submit(job, sink)
                self._used(slot, job)
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
            slot = self._slots.get(key)
            if slot is None:
                return False
            if pin is not None:
                slot.pinned = pin
            if ttl_s is not None:
                slot.ttl_s = keep_for(ttl_s)
            self._wake.notify_all()
        self.residents_changed.emit(None)
        return True

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Cancel every job, unload every model and join the threads. True if all ended in time."""
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
            self._slots.clear()
            self._focus = None
            self._wake.notify_all()
        end = time.monotonic() + timeout
        for slot in slots:
            slot.host.close()  # all at once: each stops while the others are joined
        done = [slot.host.shutdown(max(0.1, end - time.monotonic())) for slot in slots]
        self._reaper.join(max(0.1, end - time.monotonic()))
        logger.info("model pool %s stopped", self._name)
        return all(done)

    # -- routing (under the lock) ------------------------------------------------------------------
    def _key_of(self, name: str) -> str:
        if name in self._slots:  # a loaded model's key (`Resident.key`): how views pin and unload one
            return name
        if self.resolver is None:
            # Without a library only what is loaded answers, by its file name or path.
            for slot in self._slots.values():
                info = slot.host.state.model
                if info is not None and name in (Path(info.path).name, str(info.path)):
                    return slot.key
            raise ModelNotFound(f"{name!r}: this engine runs only the models loaded in it")
        return _key(self.resolver.path_of(name))

    def _slot_for(self, key: str | None, name: str | None, loading: bool) -> _Slot:
        if key is None:
            slot = self._focus or self._latest()
            if slot is None:
                raise ModelNotFound("no model is loaded")
            return slot
        slot = self._slots.get(key)
        if slot is not None:
            return slot
        if not loading and not self.jit:
            raise ModelNotFound(f"{name} is not loaded; load it in Hearth, or turn on JIT loading in Settings")
        return self._new_slot(key)

    def _new_slot(self, key: str) -> _Slot:
        slot = _Slot(key)
        preflight = PoolPreflight(self, slot)
        slot.host = EngineHost(
            self.registry,
            queue_size=self._queue_size,
            preflight=preflight,
            reload_check=preflight.check_reload,
            calibration=self.calibration,
            name=self._name if not self._slots else f"{self._name}-{next(self._ids)}",
            resolver=self.resolver,
            jit=True,  # the host loads its own model when its first job starts
        )
        slot.host.state_changed.connect(lambda state: self._on_state(slot, state))
        self._slots[key] = slot
        return slot

    def _used(self, slot: _Slot, job: Job) -> None:
        slot.last_used = time.monotonic()
        ttl = getattr(job, "ttl_s", None)
        if ttl is not None:
            slot.ttl_s = keep_for(ttl)
        if isinstance(job, LoadJob):
            if job.pin is not None:
                slot.pinned = job.pin
            if job.focus:
                self._focus = slot
        if self._focus is None:
            self._focus = slot

    def _latest(self) -> _Slot | None:
        return max(self._slots.values(), key=lambda s: s.last_used, default=None)

    def retire(self, slot: _Slot, why: str) -> None:
        """Unload `slot` once its jobs in hand are done; jobs from now on go to a new host."""
        if slot.retiring:
            return
        slot.retiring = True
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        self._leaving = [s for s in self._leaving if s.host.thread_alive()] + [slot]
        logger.info("unloading %s: %s", Path(slot.key).name, why)
        slot.host.retire()
        if self._focus is slot:
            self._focus = self._latest()
            # Views follow the model now in focus (or none) at once, not when the old one is gone.
            self.state_changed.emit(self._focus.host.state if self._focus is not None else HostState())

    def _unload(self, job: UnloadJob, sink: Sink | None) -> JobHandle:
        try:
            with self._lock:
                if job.every:
                    slots = list(self._slots.values())
                elif job.model is not None:
                    slot = self._slots.get(self._key_of(job.model))
                    if slot is None:
                        raise ModelNotFound(f"{job.model} is not loaded")
                    slots = [slot]
                else:
                    slots = [self._focus] if self._focus is not None else []
                pinned = [Path(s.key).name for s in slots if s.pinned]
                if pinned and not job.even_pinned:
                    raise ModelPinned(
                        f"{', '.join(pinned)} {'is' if len(pinned) == 1 else 'are'} pinned in Hearth and stays "
                        'loaded; unpin it first (POST /models/load with "pin": false, or in the app)'
                    )
                for slot in slots:
                    self.retire(slot, "asked to")
        except ModelNotFound as exc:
            return _failed(job, sink, str(exc), "model_not_found")
        except ModelPinned as exc:
            return _failed(job, sink, str(exc), ModelPinned.code)
        handle = JobHandle(job=job, sink=sink)

        def finish() -> None:
            for slot in slots:
                slot.host.join()
            handle.result = None
            if sink is not None:
                sink(JobDone(None))
            handle.done.set()

        threading.Thread(target=finish, name=f"{self._name}-unload", daemon=True).start()
        self.residents_changed.emit(None)
        return handle

    # -- host threads ------------------------------------------------------------------------------
    def _on_state(self, slot: _Slot, state: HostState) -> None:
        """On `slot`'s host thread: keep what it holds current, drop it after a failed load, pass it on."""
        with self._lock:
            if state.model is not None and slot.holding is not None:
                slot.holding = loaded_holding(slot)
            if state.status == "error" and state.model is None:
                self.retire(slot, "its load failed")
            focus = self._focus is slot
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
                for slot in list(self._slots.values()):
                    left, busy = self._idle_left(slot, now)
                    if busy:
                        wait = min(wait or REAP_POLL_S, REAP_POLL_S)
                    elif left is not None and left <= 0:
                        self.retire(slot, "idle past its time-to-live")
                        self.notice.emit(f"Unloaded {Path(slot.key).name}: idle past its time-to-live")
                        self.residents_changed.emit(None)
                    elif left is not None:
                        wait = left if wait is None else min(wait, left)
                self._wake.wait(wait)

    def _ttl(self, slot: _Slot) -> float | None:
        ttl = self.idle_ttl_s if slot.ttl_s is None else slot.ttl_s
        return None if ttl is None or math.isinf(ttl) or slot.pinned else ttl

    def _idle_left(self, slot: _Slot, now: float) -> tuple[float | None, bool]:
        """(seconds until `slot` is unloaded for being idle or None, whether it is busy now)."""
        ttl = self._ttl(slot)
        if ttl is None:
            return None, False
        since = slot.host.idle_since()
        if since is None or slot.host.state.status in ("loading", "generating"):
            return None, True
        return max(since, slot.last_used) + ttl - now, False

    def _resident(self, slot: _Slot, now: float) -> Resident:
        left, _ = self._idle_left(slot, now)
        return Resident(
            key=slot.key,
            state=slot.host.state,
            memory_bytes=slot.holding.total if slot.holding is not None else 0,
            pinned=slot.pinned,
            ttl_s=self._ttl(slot),
            idle_left_s=None if left is None else max(0.0, left),
            last_used=slot.last_used,
            focus=slot is self._focus,
        )

    def __repr__(self) -> str:
        return f"ModelPool({len(self._slots)} loaded)"


def _failed(job: Job, sink: Sink | None, message: str, code: str) -> JobHandle:
    """A job that fails before any host takes it, told through its sink as a host would."""
    handle = JobHandle(job=job, sink=sink)
    handle.error, handle.error_code = message, code
    if sink is not None:
        sink(JobFailed(message, code))
    handle.done.set()
    return handle
