"""Letting a model into the pool: the preflight of a pool's host, run on that host's thread as it loads.

It validates the file, makes room (the least recently used unpinned models unloaded until the new one
fits beside the rest, residency.py), waits for those to be gone, then checks the fit against live memory
as a single load would, with what the models that stay hold unseen taken off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from app.core.engines.base import LoadSpec
from app.core.errors import HearthError
from app.core.models.devices import Machine
from app.core.models.memory import MemoryEstimate
from app.core.models.spec import ModelSpec
from app.core.runtime.preflight import (
    LoadRefused,
    ModelLimitReached,
    PreflightResult,
    check_model,
    fit_check,
    planned_load,
)
from app.core.runtime.residency import Candidate, Holding, beside, holding_of, pick_victims


class Resident(Protocol):
    """What admission reads and sets of one of the pool's models (pool._Slot)."""

    key: str
    host: Any
    pinned: bool
    last_used: float
    retiring: bool
    holding: Holding | None
    estimate: MemoryEstimate | None
    mapped: bool
    unified: bool


class Pool(Protocol):
    """What admission needs of the pool: its lock, its models, live memory, the cap, and retiring one."""

    @property
    def lock(self) -> Any: ...

    max_models: int
    notice: Any

    def machine(self) -> Machine: ...

    def others(self, slot: Any) -> list[Any]: ...

    def leaving(self, slot: Any) -> list[Any]: ...

    def retire(self, slot: Any, why: str) -> None: ...


logger = logging.getLogger(__name__)


def loaded_holding(slot: Resident) -> Holding:
    """What `slot` holds once its model is in memory."""
    return holding_of(slot.estimate, mapped=slot.mapped, loaded=True, unified=slot.unified)


def _check_cap(cap: int, others: list[Any], label: str) -> None:
    """Refuse (ModelLimitReached) a model the cap on loaded models has no room for: those that cannot be
    unloaded for it (pinned, or still loading) already fill it."""
    if cap <= 0:
        return
    held = [s for s in others if s.pinned or not s.host.state.model]
    if len(held) < cap:
        return
    pinned = [Path(s.key).name for s in held if s.pinned]
    why = f"pinned: {', '.join(pinned)}" if pinned else "still loading"
    raise ModelLimitReached(
        f"{label} cannot be loaded: at most {cap} model{'s' if cap != 1 else ''} may be loaded at once "
        f"(Settings → Server → Models loaded at once, or `hearth serve --max-models`), and the "
        f"{'ones' if len(held) != 1 else 'one'} loaded cannot be unloaded for it ({why}). Unpin or unload one first."
    )


@contextmanager
def _naming_pinned(kept: list[Any]) -> Iterator[None]:
    """A LoadRefused raised inside says which of the models `kept` beside the load are pinned."""
    try:
        yield
    except LoadRefused as exc:
        pinned = [Path(s.key).name for s in kept if s.pinned]
        if pinned:
            raise LoadRefused(f"{exc}\nKept loaded (pinned): {', '.join(pinned)}.") from exc
        raise


class PoolPreflight:
    def __init__(self, pool: Pool, slot: Resident) -> None:
        self.pool = pool
        self.slot = slot

    def __call__(self, spec: LoadSpec, fmt: str, plan_check: bool) -> PreflightResult:
        """On the slot's host thread, before native code sees the model."""
        path = Path(spec.path).expanduser()
        if self.slot.retiring:  # a job left in the hand of a model being unloaded does not load it again
            raise HearthError(f"{path.name} is being unloaded; ask again to load it anew")
        model = check_model(path, fmt)
        self.slot.mapped = fmt == "gguf" and spec.use_mmap
        self._make_room(model, spec, path.name, plan_check)
        with self.pool.lock:
            leaving = self.pool.leaving(self.slot)
        for gone in leaving:  # those just picked, and any other still unloading: their memory comes back
            gone.host.join()
        if model is None:
            return PreflightResult()  # plug-in formats validate themselves and plan nothing
        if not plan_check:
            return PreflightResult(spec=model)
        with self.pool.lock:
            kept = self.pool.others(self.slot)
            machine = beside(self.pool.machine(), [s.holding for s in kept if s.holding is not None])
        with _naming_pinned(kept):
            result = fit_check(model, spec, machine, path.name)
        if result.plan is not None:
            self.slot.estimate = result.plan.estimate
        return result

    def check_reload(self, spec: LoadSpec, fmt: str, loaded: PreflightResult | None) -> None:
        """On the slot's host thread, before its loaded model is let go for a new load of itself: refuse one
        that cannot fit even with this model and every unpinned one beside it unloaded, or that the cap on
        loaded models has no room for. Nothing is unloaded or reserved here; the load's own preflight
        then picks what to unload, as for any load."""
        path = Path(spec.path).expanduser()
        # The file the loaded model was checked from: its spec, not a second read of its header.
        model = loaded.spec if loaded is not None and loaded.spec is not None else check_model(path, fmt)
        if model is None:
            return
        with self.pool.lock:
            others = self.pool.others(self.slot)
            staying = [s for s in others if s.pinned or not s.host.state.model]
            going = [s.holding for s in others if s not in staying and s.holding is not None]
            kept = [s.holding for s in staying if s.holding is not None]
            machine = beside(self.pool.machine(), kept, [*going, self.slot.holding or Holding()])
        with _naming_pinned(staying):
            fit_check(model, spec, machine, path.name)

    def _make_room(self, model: ModelSpec | None, spec: LoadSpec, label: str, plan_check: bool) -> None:
        """Under the pool's lock: pick and retire the models to unload (the caller waits for them), and
        reserve what this one will hold, so an admission running next counts it."""
        pool = self.pool
        with pool.lock:
            others = self.pool.others(self.slot)
            holding = {s.key: s.holding or Holding() for s in others}
            # A model still loading cannot be unloaded yet; it stays, and counts.
            loaded = [Candidate(s.key, s.last_used, s.pinned, holding[s.key]) for s in others if s.host.state.model]
            machine = pool.machine() if model is not None and plan_check else None

            def planned_beside(victims: list[Candidate] | tuple[Candidate, ...]):
                assert model is not None and machine is not None
                gone = {v.key for v in victims}
                kept = [h for key, h in holding.items() if key not in gone]
                return planned_load(model, spec, beside(machine, kept, [v.holding for v in victims]), label).plan

            def fits(victims) -> bool:
                return machine is None or planned_beside(victims).fits

            picked = pick_victims(fits, loaded, pool.max_models, staying=len(others))
            if picked is None:
                _check_cap(pool.max_models, others, label)
                picked = []  # nothing to gain: the fit check then refuses with the planner's reasons
            victims = [s for s in others if s.key in {c.key for c in picked}]
            for victim in victims:
                pool.retire(victim, f"to make room for {label}")
                pool.notice.emit(f"Unloaded {Path(victim.key).name} to make room for {label}")
            if machine is not None and model is not None:
                plan = planned_beside(picked)
                self.slot.estimate, self.slot.unified = plan.estimate, machine.unified
            self.slot.holding = holding_of(self.slot.estimate, mapped=self.slot.mapped, loaded=False)
        if victims:
            logger.info("unloading %s to make room for %s", ", ".join(Path(v.key).name for v in victims), label)
