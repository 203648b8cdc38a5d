"""Which loaded models stay when another one comes: the memory arithmetic of keeping several resident.

A model holds memory the OS shows as used (its KV cache, compute buffers, anything in VRAM) and, where
llama.cpp memory-maps the file, weights the OS counts as reclaimable page cache: Linux's MemAvailable and
macOS's free+inactive still include them, although unloading is the only way to get them back. So a new
model is planned against live free memory *less what the loaded ones hold unseen*, with the planner's own
margins; if it does not fit, the least recently used unpinned models go first, one at a time, until it does.
Pure functions: the pool (pool.py) calls them under its lock with what it knows of each model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from app.core.models.devices import Device, Machine
from app.core.models.memory import MemoryEstimate


@dataclass(frozen=True)
class Holding:
    """What one resident model holds, by device: `unseen` the part live free memory does not show as used."""

    seen: dict[str, int] = field(default_factory=dict)
    unseen: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.seen.values()) + sum(self.unseen.values())


def holding_of(estimate: MemoryEstimate | None, *, mapped: bool, loaded: bool, unified: bool = False) -> Holding:
    """What a model planned as `estimate` holds. `mapped`: its weights are memory-mapped (RAM, and Apple's
    unified memory, sees them as page cache); `loaded`: it is in memory already (else, being admitted,
    none of it shows yet)."""
    if estimate is None:
        return Holding()
    seen: dict[str, int] = {}
    unseen: dict[str, int] = {}
    for use in estimate.devices:
        hidden = use.weights if mapped and (use.device == "CPU" or unified) else 0
        if not loaded:
            hidden = use.total
        if use.total - hidden:
            seen[use.device] = seen.get(use.device, 0) + use.total - hidden
        if hidden:
            unseen[use.device] = unseen.get(use.device, 0) + hidden
    return Holding(seen, unseen)


def beside(machine: Machine, kept: Iterable[Holding], leaving: Iterable[Holding] = ()) -> Machine:
    """`machine` (read from live free memory) as a new model sees it: less what the `kept` models hold
    unseen, plus what the `leaving` ones (about to be unloaded) hold where the OS shows it."""
    delta: dict[str, int] = {}
    for h in kept:
        for name, n in h.unseen.items():
            delta[name] = delta.get(name, 0) - n
    for h in leaving:
        for name, n in h.seen.items():
            delta[name] = delta.get(name, 0) + n
    if not delta:
        return machine
    if machine.unified:  # one pool of RAM behind both devices: every change moves both
        shared = sum(delta.values())
        delta = {d.name: shared for d in (machine.cpu, *machine.gpus)}

    def moved(d: Device) -> Device:
        n = delta.get(d.name, 0)
        return dataclasses.replace(d, free_bytes=max(0, d.free_bytes + n), budget_bytes=max(0, d.budget_bytes + n))

    return dataclasses.replace(machine, cpu=moved(machine.cpu), gpus=tuple(moved(g) for g in machine.gpus))


@dataclass(frozen=True)
class Candidate:
    """A loaded model as the eviction order sees it."""

    key: str
    last_used: float  # monotonic seconds
    pinned: bool
    holding: Holding


def pick_victims(
    fits: Callable[[Sequence[Candidate]], bool], loaded: Sequence[Candidate], cap: int = 0, staying: int | None = None
) -> list[Candidate] | None:
    """The fewest least-recently-used unpinned models whose unloading lets a new one in: `fits(victims)`
    says whether it fits once they are gone; `cap` (0: none) bounds how many stay beside it, of `staying`
    (default: all of `loaded`; more when others are still loading and cannot be picked).
    [] when it fits as things are; None when even unloading every unpinned model is not enough."""
    order = sorted((c for c in loaded if not c.pinned), key=lambda c: c.last_used)
    victims: list[Candidate] = []
    count = len(loaded) if staying is None else staying
    while True:
        within_cap = cap <= 0 or count - len(victims) < cap
        if within_cap and fits(victims):
            return victims
        if not order:
            return None
        victims.append(order.pop(0))
