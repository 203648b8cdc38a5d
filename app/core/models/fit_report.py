"""Text and JSON views of a Recommendation, for `hearth fit` (the GUI has its own widgets)."""

from __future__ import annotations

from typing import Any

from app.core.models.recommend import Assessment, Recommendation
from app.core.units import fmt_bytes


def _row(a: Assessment) -> list[str]:
    p, s = a.plan, a.speed
    if not a.runnable:
        fit = "—"
    else:
        fit = p.label if p else "unknown"
    gpu = (
        ""
        if not p or not p.machine.gpus
        else ("all" if p.options.n_gpu_layers < 0 else f"{p.options.n_gpu_layers}/{p.n_layers}")
    )
    ctx = f"{p.options.n_ctx:,}" if p and p.fits else ""
    speed = f"{s.decode_tok_s:,.0f}" if s and a.runnable else ""
    note = a.reason or (f"context lowered from {p.requested_ctx:,}" if p and p.ctx_reduced else "")
    return [
        ("* " if a.recommended else "  ") + a.variant.label,
        a.variant.format.upper(),
        fmt_bytes(a.variant.size_bytes),
        fit,
        ctx,
        gpu,
        speed,
        a.quality,
        note,
    ]


def format_recommendation(rec: Recommendation, title: str = "") -> str:
    head = ["  variant", "format", "size", "fit", "context", "GPU layers", "tok/s", "quality", "note"]
    rows = [head] + [_row(a) for a in rec.assessments]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [title] if title else []
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    lines.append("")
    best = rec.recommended
    if best is not None and best.plan is not None:
        lines.append(f"Recommended: {best.variant.label} — {rec.why}")
        lines += ["  " + ln for ln in best.plan.explanation.splitlines()]
        if best.speed:
            s = best.speed
            lines.append(
                f"  speed: ≈ {s.decode_tok_s:,.0f} tok/s decode ({s.decode_tok_s_full_ctx:,.0f} at full "
                f"context), {s.prefill_tok_s:,.0f} tok/s prompt — {s.basis}"
            )
    else:
        lines.append(f"No recommendation: {rec.why}")
    return "\n".join(lines)


def recommendation_json(rec: Recommendation) -> dict[str, Any]:
    def one(a: Assessment) -> dict[str, Any]:
        p, s = a.plan, a.speed
        return {
            "label": a.variant.label,
            "format": a.variant.format,
            "size_bytes": a.variant.size_bytes,
            "repo_id": a.variant.repo_id,
            "revision": a.variant.revision,
            "files": a.variant.files,
            "runnable": a.runnable,
            "reason": a.reason,
            "recommended": a.recommended,
            "kld": a.kld,
            "quality": a.quality,
            "plan": None
            if p is None
            else {
                "verdict": p.verdict,
                "n_ctx": p.options.n_ctx,
                "requested_ctx": p.requested_ctx,
                "n_gpu_layers": p.options.n_gpu_layers,
                "backend": p.machine.backend,
                "devices": [
                    {"device": u.device, **u.parts(), "total": u.total, "budget": d.budget_bytes}
                    for d, u in p.device_rows()
                ],
                "explanation": p.explanation,
            },
            "speed": None
            if s is None
            else {
                "decode_tok_s": s.decode_tok_s,
                "decode_tok_s_full_ctx": s.decode_tok_s_full_ctx,
                "prefill_tok_s": s.prefill_tok_s,
                "basis": s.basis,
            },
        }

    return {
        "recommended": rec.recommended.variant.label if rec.recommended else None,
        "why": rec.why,
        "variants": [one(a) for a in rec.assessments],
    }
