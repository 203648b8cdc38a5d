"""Offload planner: where a model's layers go and the largest context that fits, with the why."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from app.core.models.devices import Device, Machine
from app.core.models.memory import DeviceUse, LoadOptions, MemoryEstimate, estimate_memory
from app.core.models.projector import ProjectorMemory
from app.core.models.spec import ModelSpec
from app.core.settings import AUTO_PARALLEL, AUTO_PARALLEL_MAX
from app.core.units import fmt_bytes

Verdict = Literal["full_gpu", "partial", "cpu", "no_fit"]
VERDICT_LABEL = {
    "full_gpu": "Full GPU offload",
    "partial": "Partial GPU offload",
    "cpu": "Runs on the CPU",
    "no_fit": "Will not fit",
}
CONTEXT_STEPS = (131072, 65536, 32768, 16384, 8192, 4096, 2048, 1024, 512)
MIN_CONTEXT = 2048
# Auto slots beyond the first may take at most this share of the memory the one-slot plan leaves free on each
# device: the rest stays for a second resident model (the pool keeps several) and for the system.
AUTO_SLOTS_SHARE = 0.5


@dataclass
class Plan:
    verdict: Verdict
    options: LoadOptions  # what to load with (n_ctx, n_gpu_layers, ...)
    estimate: MemoryEstimate
    requested_ctx: int
    machine: Machine
    explanation: str
    layers_on_gpu: int = 0
    n_layers: int = 0
    notes: list[str] = field(default_factory=list)
    slots_requested: int = 1  # the parallel sequences asked for (AUTO_PARALLEL: memory decides); `slots`: how many fit

    @property
    def slots(self) -> int:
        """Sequences decoded together, each with its own n_ctx cells (1: the single-stream path)."""
        return self.options.n_seq

    @property
    def fits(self) -> bool:
        return self.verdict != "no_fit"

    @property
    def ctx_reduced(self) -> bool:
        return self.fits and self.options.n_ctx < self.requested_ctx

    @property
    def label(self) -> str:
        return VERDICT_LABEL[self.verdict]

    def device_rows(self, beside: MemoryEstimate | None = None) -> list[tuple[Device, DeviceUse]]:
        """(device, its use) for every device the plan touches, CPU first; with `beside` (a vision projector's
        share) added where it is loaded."""
        pools = {d.name: d for d in (self.machine.cpu, *self.machine.gpus)}
        estimate = _combined(self.estimate, beside) if beside is not None else self.estimate
        return [(pools[u.device], u) for u in estimate.devices if u.device in pools]


def split_layers(n: int, budgets: list[int]) -> list[int]:
    """Split n layers across GPUs in proportion to their budgets (llama.cpp's default tensor split)."""
    total = sum(max(0, b) for b in budgets)
    if not budgets or total <= 0:
        return [0] * len(budgets)
    shares = [n * max(0, b) / total for b in budgets]
    split = [int(s) for s in shares]
    for i in sorted(range(len(budgets)), key=lambda i: shares[i] - split[i], reverse=True)[: n - sum(split)]:
        split[i] += 1
    return split


def _estimate(spec: ModelSpec, opts: LoadOptions, m: Machine, n_gpu: int) -> MemoryEstimate:
    if not m.gpus or n_gpu == 0:
        return estimate_memory(spec, opts.model_copy(update={"n_gpu_layers": 0}), backend="cpu", repack=m.repack)
    split = split_layers(n_gpu, [g.budget_bytes for g in m.gpus])
    return estimate_memory(
        spec,
        opts.model_copy(update={"n_gpu_layers": n_gpu}),
        # ROCm is ggml's CUDA backend compiled with HIP: the same buffers, so CUDA's memory figures.
        backend="cuda" if m.backend == "rocm" else m.backend,
        gpu_names=[g.name for g in m.gpus],
        layer_split=split,
        repack=m.repack,
    )


def _fits(est: MemoryEstimate, m: Machine) -> bool:
    pools = {d.name: d for d in (m.cpu, *m.gpus)}
    for use in est.devices:
        if use.total > pools[use.device].budget_bytes:
            return False
    # Apple: GPU and CPU buffers come out of the same RAM, which must hold them all.
    return not (m.unified and est.total > m.cpu.budget_bytes)


def _contexts(requested: int, min_ctx: int) -> list[int]:
    floor = min(requested, min_ctx)
    return [requested] + [c for c in CONTEXT_STEPS if floor <= c < requested]


def plan_load(
    spec: ModelSpec,
    machine: Machine,
    *,
    n_ctx: int | None = None,
    options: LoadOptions | None = None,
    min_ctx: int = MIN_CONTEXT,
    max_slots: int | None = None,
    within_trained: bool = True,
) -> Plan:
    """Plan a load: full GPU > partial > CPU at the largest context ≤ the requested one that fits.

    `within_trained`: the context asked is lowered to the model's trained length first; off, it is planned
    as asked (a load checked at the context it will really have: llama.cpp allocates what it is given).

    `max_slots`: plan the context and offload for one conversation, then give it as many parallel slots
    (each with its own n_ctx KV cells) as fit beside it, at most `max_slots` and at least one: fewer slots,
    never a smaller context. AUTO_PARALLEL: up to AUTO_PARALLEL_MAX, the extra slots within AUTO_SLOTS_SHARE of
    the memory left free. None keeps `options.n_seq` as given (a load checked as asked)."""
    base = options or LoadOptions()
    if max_slots is not None:
        if max_slots < AUTO_PARALLEL:
            raise ValueError(f"max_slots must be {AUTO_PARALLEL} (auto) or more, not {max_slots}")
        one = base.model_copy(update={"n_seq": 1})
        single = plan_load(spec, machine, n_ctx=n_ctx, options=one, min_ctx=min_ctx, within_trained=within_trained)
        return add_slots(single, spec, max_slots)
    requested = n_ctx or base.n_ctx
    if spec.n_ctx_train and within_trained:
        requested = min(requested, spec.n_ctx_train)
    total_layers = spec.n_layers + 1  # the output layer counts as one more, as in llama.cpp
    for ctx in _contexts(requested, min_ctx):
        opts = base.model_copy(update={"n_ctx": ctx})
        candidates: list[tuple[Verdict, int]] = []
        if machine.gpus:
            candidates.append(("full_gpu", -1))
            candidates += [("partial", k) for k in range(spec.n_layers, 0, -1)]
        candidates.append(("cpu", 0))
        for verdict, n_gpu in candidates:
            est = _estimate(spec, opts, machine, total_layers if n_gpu < 0 else n_gpu)
            if _fits(est, machine):
                on_gpu = total_layers if n_gpu < 0 else n_gpu
                final = opts.model_copy(update={"n_gpu_layers": -1 if n_gpu < 0 else n_gpu})
                plan = Plan(verdict, final, est, requested, machine, "", on_gpu, total_layers, list(machine.notes))
                plan.explanation = explain(plan, spec)
                return plan
    # Nothing fits: explain with the smallest context on the largest pool.
    opts = base.model_copy(update={"n_ctx": _contexts(requested, min_ctx)[-1]})
    n_gpu = total_layers if machine.gpus else 0
    est = _estimate(spec, opts, machine, n_gpu)
    plan = Plan(
        "no_fit", opts, est, requested, machine, "", n_gpu if machine.gpus else 0, total_layers, list(machine.notes)
    )
    plan.explanation = explain(plan, spec)
    return plan


def add_slots(single: Plan, spec: ModelSpec, max_slots: int) -> Plan:
    """`single` (a one-sequence plan) with the most slots ≤ `max_slots` that fit at its context and
    offload, each slot with its own KV cells (kv_unified off: no slot's reply waits on another's cells; the same
    reply to the bit beside others needs LoadSpec.deterministic too, as llama.cpp's kernels are not batch-invariant).
    AUTO_PARALLEL: up to AUTO_PARALLEL_MAX slots, the ones past the first within a share of what is left free."""
    auto = max_slots == AUTO_PARALLEL
    if not single.fits or max_slots == 1:
        single.slots_requested = max_slots
        single.explanation = explain(single, spec)
        return single
    n_gpu = single.layers_on_gpu if single.machine.gpus else 0
    for n in range(AUTO_PARALLEL_MAX if auto else max_slots, 1, -1):
        opts = single.options.model_copy(update={"n_seq": n, "kv_unified": False})
        est = _estimate(spec, opts, single.machine, n_gpu)
        if _fits(est, single.machine) and (not auto or _within_share(est, single.estimate, single.machine)):
            break
    else:
        n, opts, est = 1, single.options, single.estimate
    plan = replace(single, options=opts, estimate=est, slots_requested=max_slots)
    plan.explanation = explain(plan, spec)
    return plan


def _within_share(est: MemoryEstimate, single: MemoryEstimate, m: Machine) -> bool:
    """Whether what `est` adds to the one-slot plan `single` stays within AUTO_SLOTS_SHARE of the memory
    `single` leaves free, on every device (on unified memory, of the one RAM both come out of)."""
    pools = {d.name: d for d in (m.cpu, *m.gpus)}
    before = {u.device: u.total for u in single.devices}
    if m.unified:
        return est.total - single.total <= AUTO_SLOTS_SHARE * max(0, m.cpu.budget_bytes - single.total)
    for use in est.devices:
        left = pools[use.device].budget_bytes - before.get(use.device, 0)
        if use.total - before.get(use.device, 0) > AUTO_SLOTS_SHARE * max(0, left):
            return False
    return True


def slots_line(plan: Plan) -> str:
    """ "4 parallel slots × 8,192 tokens: KV 720 MiB", and why there are fewer than asked."""
    kv = sum(u.kv for u in plan.estimate.devices)
    n = plan.slots
    head = f"{n} parallel slot{'s' if n != 1 else ''} × {plan.options.n_ctx:,} tokens: KV {fmt_bytes(kv, 2)}"
    if plan.slots_requested == AUTO_PARALLEL:
        head += f" (auto: as many as memory allows, up to {AUTO_PARALLEL_MAX})"
    elif n < plan.slots_requested:
        head += f" (room for {n} of the {plan.slots_requested} asked)"
    return head


def _sum_line(use: DeviceUse, opts: LoadOptions) -> str:
    parts = use.parts()
    per = f"{opts.n_seq} × {opts.n_ctx:,}" if opts.n_seq > 1 and not opts.kv_unified else f"{opts.n_ctx:,}"
    kv_label = f"KV {fmt_bytes(parts['kv'], 2)} ({per} ctx, {opts.cache_type_k})"
    pieces = [f"weights {fmt_bytes(parts['weights'], 2)}"]
    if parts["kv"]:
        pieces.append(kv_label)
    pieces += [f"compute {fmt_bytes(parts['compute'], 2)}", f"overhead {fmt_bytes(parts['overhead'], 2)}"]
    return " + ".join(pieces) + f" = {fmt_bytes(use.total, 2)}"


def explain(plan: Plan, spec: ModelSpec) -> str:
    """One line per device: what it holds against what it has free, then the verdict."""
    opts = plan.options
    lines = []
    for device, use in plan.device_rows():
        cmp = "≤" if use.total <= device.budget_bytes else ">"
        where = f"{fmt_bytes(device.budget_bytes, 1)} usable {device.label or device.name}"
        lines.append(f"{device.name}: {_sum_line(use, opts)} {cmp} {where}")
    if plan.machine.unified and plan.estimate.total > plan.machine.cpu.budget_bytes:
        lines.append(
            f"together {fmt_bytes(plan.estimate.total, 2)} > {fmt_bytes(plan.machine.cpu.budget_bytes)}"
            " of free unified memory"
        )
    n = plan.n_layers
    if plan.verdict == "full_gpu":
        lines.append(f"→ all {n} layers on the GPU")
    elif plan.verdict == "partial":
        lines.append(f"→ {plan.layers_on_gpu} of {n} layers on the GPU, the rest on the CPU (slower)")
    elif plan.verdict == "cpu":
        lines.append(
            f"→ all {n} layers on the CPU" + (" (the GPU has no room for even one layer)" if plan.machine.gpus else "")
        )
    else:
        need = plan.estimate.total
        have = (
            sum(d.budget_bytes for d in (plan.machine.cpu, *plan.machine.gpus))
            if not plan.machine.unified
            else plan.machine.cpu.budget_bytes
        )
        lines.append(
            f"→ will not fit: needs {fmt_bytes(need, 2)} even at {opts.n_ctx:,} context, {fmt_bytes(have, 1)} usable"
        )
    if plan.ctx_reduced:
        lines.append(f"context lowered from {plan.requested_ctx:,} to {opts.n_ctx:,} to fit")
    if plan.fits and (plan.slots > 1 or plan.slots_requested != 1):
        lines.append(slots_line(plan))
    return "\n".join(lines + plan.notes)


@dataclass
class DraftFit:
    """A draft model beside a plan (speculative decoding): its memory, and whether both fit together."""

    estimate: MemoryEstimate  # the draft model's own share
    fits: bool
    line: str  # "draft model: weights … = …" or why it does not fit


def draft_fit(plan: Plan, draft: ModelSpec, label: str = "the draft model") -> DraftFit:
    """The draft's memory as the engine loads it (llamacpp/draft.py): as many GPU layers as the model has
    (all of its own for "all"), one KV stream per slot at the model's context, the same KV type, added to
    the plan's on each device and checked against the same budgets."""
    opts = plan.options
    total = draft.n_layers + 1
    wanted = opts.n_gpu_layers
    n_gpu = 0 if not plan.machine.gpus or wanted == 0 else (total if wanted < 0 else min(wanted, total))
    own = opts.model_copy(update={"n_gpu_layers": -1 if n_gpu == total else n_gpu, "kv_unified": False})
    est = _estimate(draft, own, plan.machine, n_gpu)
    both = _combined(plan.estimate, est)
    fits = plan.fits and _fits(both, plan.machine)
    size = fmt_bytes(est.total, 2)
    if fits:
        return DraftFit(est, True, f"{label}: {size} more ({fmt_bytes(both.total, 2)} with the model)")
    return DraftFit(est, False, f"{label} needs {size} more, which does not fit beside the model")


def projector_fit(plan: Plan, projector: ProjectorMemory, label: str = "the vision projector") -> DraftFit:
    """A vision projector beside a plan: its weights and the image encoder's buffer on the device libmtmd
    puts it (the first GPU when the model is offloaded, else the CPU), checked against the same budgets."""
    m = plan.machine
    device = m.gpus[0].name if m.gpus and plan.options.n_gpu_layers != 0 else m.cpu.name
    est = MemoryEstimate(plan.options, 0, [DeviceUse(device, weights=projector.weights, compute=projector.compute)])
    both = _combined(plan.estimate, est)
    fits = plan.fits and _fits(both, m)
    size = fmt_bytes(est.total, 2)
    if fits:
        return DraftFit(est, True, f"{label}: {size} more ({fmt_bytes(both.total, 2)} with the model)")
    return DraftFit(est, False, f"{label} needs {size} more, which does not fit beside the model")


def _combined(a: MemoryEstimate, b: MemoryEstimate) -> MemoryEstimate:
    """Two loads' memory, device by device."""
    uses = {u.device: replace(u) for u in a.devices}
    for u in b.devices:
        have = uses.get(u.device)
        if have is None:
            uses[u.device] = replace(u)
            continue
        for name in ("weights", "repack", "kv", "recurrent", "output", "compute", "overhead", "layers"):
            setattr(have, name, getattr(have, name) + getattr(u, name))
    return MemoryEstimate(a.options, a.kv_cells + b.kv_cells, list(uses.values()))
