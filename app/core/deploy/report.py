"""Text and JSON views of a DeployPlan, for `hearth plan` (a GUI would draw its own)."""

from __future__ import annotations

import shlex
from typing import Any

from app.core.deploy.engines import dtype_label
from app.core.deploy.plan import DeployPlan
from app.core.deploy.sizing import GpuBudget
from app.core.units import fmt_bytes


def _budget_line(b: GpuBudget, memory: int, fraction: float) -> str:
    sign = "≤" if b.fits else ">"
    return (
        f"weights {fmt_bytes(b.weights)} + KV {fmt_bytes(b.kv)} + reserve {fmt_bytes(b.reserve)} = "
        f"{fmt_bytes(b.total)} {sign} {fmt_bytes(b.usable)} (the engine's {fraction:.0%} of {fmt_bytes(memory)})"
    )


def format_plan(plan: DeployPlan) -> str:
    s, t = plan.shape, plan.target
    on = f"one {t.name}" if t.per_node == 1 else f"{plan.gpus_available} × {t.name}"
    who = "1 user" if plan.users == 1 else f"{plan.users} users"
    lines = [f"{s.name} on {on}, {who} × {plan.ctx:,} tokens of context"]
    params = f"{s.n_params / 1e9:.1f}B parameters"
    if s.active_params < s.n_params:
        params += f" ({s.active_params / 1e9:.1f}B active)"
    kv_seq = plan.kv_total // max(1, plan.users)
    lines.append(
        f"  model     {params}, {s.spec.n_layers} layers; KV {plan.kv_per_token:,} B per token, "
        f"{fmt_bytes(kv_seq)} per user at full context, {fmt_bytes(plan.kv_total)} for all users"
    )
    if plan.dtype:
        lines.append(f"  weights   {dtype_label(plan.dtype)}: {fmt_bytes(plan.weights_total)} in all")
    budget = plan.layout or plan.closest
    if budget is not None:
        where = f"TP {budget.tp}" + (f" × PP {budget.pp}" if budget.pp > 1 else "")
        lines.append(f"  per GPU   ({where}) {_budget_line(budget, t.memory_bytes, t.usable_fraction)}")
    verdict = plan.verdict
    if verdict.startswith("fits"):  # a model name keeps its own case
        verdict = "F" + verdict[1:]
    lines.append(f"  verdict   {verdict}.")
    if plan.fits and plan.engine:
        lines.append(f"  engine    {plan.engine}: {plan.reason}.")
    if plan.launch is not None:
        for step in plan.launch.prepare:
            lines.append(f"  first     {shlex.join(step)}")
        lines.append(f"  command   {plan.launch.command}")
        lines += [f"            {ln}" for ln in plan.launch.config]
    if plan.speed is not None:
        sp = plan.speed
        lines.append(
            f"  speed     ≈ {sp.per_user_tok_s:,.1f} tok/s per user with {who} decoding at full context "
            f"({sp.aggregate_tok_s:,.0f} tok/s in all, bound by {sp.bound_by}); ≈ {sp.single_user_tok_s:,.1f} tok/s "
            f"for one user at the start of a conversation — {sp.basis}"
        )
    notes = plan.notes + (plan.launch.notes if plan.launch else [])
    lines += [f"  note      {n}." for n in notes]
    return "\n".join(lines)


def _budget_json(b: GpuBudget | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {
        "tensor_parallel": b.tp,
        "pipeline_parallel": b.pp,
        "gpus": b.gpus,
        "weights_bytes": b.weights,
        "kv_bytes": b.kv,
        "reserve_bytes": b.reserve,
        "total_bytes": b.total,
        "usable_bytes": b.usable,
        "fits": b.fits,
    }


def plan_json(plan: DeployPlan) -> dict[str, Any]:
    s, t = plan.shape, plan.target
    sp = plan.speed
    return {
        "model": s.name,
        "source": s.source,
        "n_params": s.n_params,
        "active_params": s.active_params,
        "max_ctx": s.max_ctx,
        "target": {
            "id": t.id,
            "name": t.name,
            "memory_bytes": t.memory_bytes,
            "bandwidth_gbps": t.bandwidth_gbps,
            "usable_fraction": t.usable_fraction,
        },
        "gpus_available": plan.gpus_available,
        "users": plan.users,
        "ctx": plan.ctx,
        "fits": plan.fits,
        "verdict": plan.verdict,
        "dtype": plan.dtype,
        "dtype_label": dtype_label(plan.dtype) if plan.dtype else None,
        "weights_bytes": plan.weights_total,
        "kv_bytes_per_token": plan.kv_per_token,
        "kv_bytes_total": plan.kv_total,
        "per_gpu": _budget_json(plan.layout or plan.closest),
        "needed": _budget_json(plan.needed),
        "engine": plan.engine if plan.fits else None,
        "reason": plan.reason if plan.fits else None,
        "command": plan.launch.command if plan.launch else None,
        "argv": plan.launch.argv if plan.launch else None,
        "prepare": plan.launch.prepare if plan.launch else [],
        "config": plan.launch.config if plan.launch else [],
        "speed": None
        if sp is None
        else {
            "per_user_tok_s": sp.per_user_tok_s,
            "aggregate_tok_s": sp.aggregate_tok_s,
            "single_user_tok_s": sp.single_user_tok_s,
            "bound_by": sp.bound_by,
            "efficiency": sp.efficiency,
            "basis": sp.basis,
        },
        "notes": plan.notes + (plan.launch.notes if plan.launch else []),
    }
