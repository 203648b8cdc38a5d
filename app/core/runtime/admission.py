"""Letting a model into the pool, decided from a snapshot: which loaded models to unload so a new one fits
(the least recently used unpinned ones, residency.py), what the new one will hold, and whether a reload can
fit at all. Pure functions: the pool (pool.py) takes the snapshot under its lock, applies the decision to
its own state and waits for the unloaded models, on the new model's host thread as its preflight.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.core.engines.base import LoadSpec
from app.core.models.devices import Machine
from app.core.models.memory import MemoryEstimate
from app.core.models.spec import ModelSpec
from app.core.runtime.preflight import LoadRefused, ModelLimitReached, fit_check, planned_load
from app.core.runtime.residency import Candidate, Holding, beside, pick_victims


@dataclass(frozen=True)
class Seat:
    """One model beside the one being admitted, as the pool saw it under its lock."""

    name: str  # its file's name, for the user
    key: str
    pinned: bool
    loaded: bool  # its model is in memory (one still loading cannot be unloaded yet)
    last_used: float
    holding: Holding | None


@dataclass(frozen=True)
class Room:
    """What admitting a model decides: the models to unload for it, and what its load was planned to hold."""

    unload: list[str]  # keys, least recently used first
    estimate: MemoryEstimate | None  # None: not planned (no plan check, or a plug-in format)
    unified: bool


def check_cap(cap: int, seats: list[Seat], label: str) -> None:
    """Refuse (ModelLimitReached) a model the cap on loaded models has no room for: those that cannot be
    unloaded for it (pinned, or still loading) already fill it."""
    if cap <= 0:
        return
    held = [s for s in seats if s.pinned or not s.loaded]
    if len(held) < cap:
        return
    pinned = [s.name for s in held if s.pinned]
    why = f"pinned: {', '.join(pinned)}" if pinned else "still loading"
    raise ModelLimitReached(
        f"{label} cannot be loaded: at most {cap} model{'s' if cap != 1 else ''} may be loaded at once "
        f"(Settings → Server → Models loaded at once, or `hearth serve --max-models`), and the "
        f"{'ones' if len(held) != 1 else 'one'} loaded cannot be unloaded for it ({why}). Unpin or unload one first."
    )


@contextmanager
def naming_pinned(kept: list[Seat]) -> Iterator[None]:
    """A LoadRefused raised inside says which of the models `kept` beside the load are pinned."""
    try:
        yield
    except LoadRefused as exc:
        pinned = [s.name for s in kept if s.pinned]
        if pinned:
            raise LoadRefused(f"{exc}\nKept loaded (pinned): {', '.join(pinned)}.") from exc
        raise


def make_room(
    model: ModelSpec | None, spec: LoadSpec, label: str, seats: list[Seat], machine: Machine | None, max_models: int
) -> Room:
    """The models to unload so `model` fits beside the rest on `machine` (None: no plan check) within the cap,
    and its planned memory. Refuses (ModelLimitReached) when the cap has no room even then; when memory has
    none, unloads nothing and leaves the refusal to the fit check, which gives the planner's reasons."""
    holding = {s.key: s.holding or Holding() for s in seats}
    loaded = [Candidate(s.key, s.last_used, s.pinned, holding[s.key]) for s in seats if s.loaded]

    def planned_beside(victims: list[Candidate] | tuple[Candidate, ...]):
        assert model is not None and machine is not None
        gone = {v.key for v in victims}
        kept = [h for key, h in holding.items() if key not in gone]
        return planned_load(model, spec, beside(machine, kept, [v.holding for v in victims]), label).plan

    def fits(victims) -> bool:
        return machine is None or model is None or planned_beside(victims).fits

    picked = pick_victims(fits, loaded, max_models, staying=len(seats))
    if picked is None:
        check_cap(max_models, seats, label)
        picked = []
    if machine is None or model is None:
        return Room([c.key for c in picked], None, False)
    return Room([c.key for c in picked], planned_beside(picked).estimate, machine.unified)


def check_reload(
    model: ModelSpec, spec: LoadSpec, label: str, seats: list[Seat], own: Holding | None, machine: Machine
) -> None:
    """Refuse a reload of a loaded model (holding `own`) that cannot fit even with it and every model beside
    it that may be unloaded gone; nothing is decided here beyond that."""
    staying = [s for s in seats if s.pinned or not s.loaded]
    going = [s.holding for s in seats if s not in staying and s.holding is not None]
    kept = [s.holding for s in staying if s.holding is not None]
    with naming_pinned(staying):
        fit_check(model, spec, beside(machine, kept, [*going, own or Holding()]), label)


def fit_beside(model: ModelSpec, spec: LoadSpec, label: str, kept: list[Seat], machine: Machine):
    """The single-load fit check against live memory, with what the models that stay hold unseen taken off."""
    with naming_pinned(kept):
        return fit_check(model, spec, beside(machine, [s.holding for s in kept if s.holding is not None]), label)
