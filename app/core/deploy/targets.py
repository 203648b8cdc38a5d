"""The shipped table of hardware a plan can target (`resources/deploy_targets.json`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from app.core.deploy.errors import PlanError
from app.core.resources import load_json

GiB = 1024**3
TargetClass = Literal["consumer", "datacenter", "apple"]


@dataclass(frozen=True)
class Target:
    id: str
    name: str
    vendor: str  # nvidia / amd / apple
    cls: TargetClass
    arch: str
    memory_bytes: int
    bandwidth_gbps: float
    bf16_tflops: float
    kernels: frozenset[str]  # bf16, fp8, nvfp4, int4 (AWQ/GPTQ), exl (EXL2/EXL3), mlx, gguf
    interconnect: str  # nvlink / infinity-fabric / pcie / none
    per_node: int
    usable_fraction: float
    sources: tuple[str, ...]
    aliases: tuple[str, ...] = ()

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_bytes * self.usable_fraction)

    @property
    def fast_link(self) -> bool:
        return self.interconnect in ("nvlink", "infinity-fabric")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=1)
def all_targets() -> tuple[Target, ...]:
    rows = load_json("deploy_targets.json")["targets"]
    return tuple(
        Target(
            id=r["id"],
            name=r["name"],
            vendor=r["vendor"],
            cls=r["class"],
            arch=r["arch"],
            memory_bytes=int(r["memory_gib"] * GiB),
            bandwidth_gbps=float(r["bandwidth_gbps"]),
            bf16_tflops=float(r["bf16_tflops"]),
            kernels=frozenset(r["kernels"]),
            interconnect=r["interconnect"],
            per_node=int(r["per_node"]),
            usable_fraction=float(r["usable_fraction"]),
            sources=tuple(r["sources"]),
            aliases=tuple(r.get("aliases", ())),
        )
        for r in rows
    )


def find_target(name: str) -> Target:
    """A target by id, name or alias, ignoring case and punctuation ("h100", "H100-80GB", "rtx 4090")."""
    wanted = _key(name or "")
    for t in all_targets():
        if wanted in {_key(t.id), _key(t.name), *(_key(a) for a in t.aliases)}:
            return t
    known = ", ".join(t.id for t in all_targets())
    raise PlanError(f"unknown GPU {name!r}; known targets: {known}")
