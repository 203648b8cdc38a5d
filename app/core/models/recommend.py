"""Recommender: every variant of a model, with its fit, speed and quality, and the one to pick."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.core.formats import EXL2, GGUF, MLX, ModelFormat
from app.core.models.calibration import CalibrationStore, Correction
from app.core.models.devices import Machine
from app.core.models.memory import LoadOptions
from app.core.models.planner import DraftFit, Plan, plan_load, projector_fit
from app.core.models.projector import ProjectorMemory
from app.core.models.quality import floor_kld, kld_for, quality_label
from app.core.models.spec import ModelSpec
from app.core.models.speed import SpeedPrediction, has_weights, image_seconds, predict_speed

Format = Literal[ModelFormat.GGUF, ModelFormat.MLX, ModelFormat.EXL2]
Q8_KLD = 0.0014
BALANCED_KLD = 0.0313  # Q4_K_M: the usual sweet spot of size, speed and quality
COMFORTABLE_TOK_S = 10.0  # below this, chat feels slow: prefer a smaller quant that is faster


@dataclass
class Variant:
    label: str  # "Q4_K_M", "4-bit g64", "4.0bpw"
    format: Format
    size_bytes: int
    spec: ModelSpec | None = None
    bpw: float | None = None
    repo_id: str | None = None
    revision: str | None = None  # EXL2 branch
    files: list[str] = field(default_factory=list)
    path: Path | None = None  # a local file
    # What the vision projector (`projector`) costs beside the weights, when its header was read (or sized).
    projector_memory: ProjectorMemory | None = None
    mlx_vision: bool = False  # an MLX vision-language checkpoint that mlx-vlm reads here (vision_config.py)

    @property
    def projector(self) -> str | None:
        """The vision projector this variant downloads with it (an mmproj file), or None: it reads text only."""
        return next((f for f in self.files if "mmproj" in Path(f).name.lower()), None)

    @property
    def sees_images(self) -> bool:
        return self.projector is not None or self.mlx_vision


@dataclass
class Assessment:
    variant: Variant
    plan: Plan | None
    speed: SpeedPrediction | None
    kld: float | None
    runnable: bool
    reason: str = ""  # why it cannot run here, or a caveat
    recommended: bool = False
    spec: ModelSpec | None = None  # what the plan used (scaled from a sibling when not read)
    projector: DraftFit | None = None  # the vision projector beside the plan, when the variant has one
    image_s: float | None = None  # predicted seconds to read one image (vision variants)

    @property
    def quality(self) -> str:
        return quality_label(self.kld)

    @property
    def fits(self) -> bool:
        """The model fits, and its vision projector beside it (a load refuses one that does not)."""
        beside = self.projector is None or self.projector.fits
        return self.runnable and self.plan is not None and self.plan.fits and beside


@dataclass
class Recommendation:
    assessments: list[Assessment]
    recommended: Assessment | None
    why: str


def scaled_spec(spec: ModelSpec, weight_bytes: int) -> ModelSpec:
    """A sibling variant's spec with its tensors scaled to another total (sizes known, header not read)."""
    out = copy.deepcopy(spec)
    ratio = weight_bytes / max(1, spec.weight_bytes)
    out.block_bytes = [int(b * ratio) for b in spec.block_bytes]
    out.expert_bytes = [int(b * ratio) for b in spec.expert_bytes]
    out.repack_block_bytes = [0] * len(spec.block_bytes)
    out.repack_embd_bytes = 0
    out.input_bytes = int(spec.input_bytes * ratio)
    out.output_bytes = int(spec.output_bytes * ratio)
    out.other_bytes = int(spec.other_bytes * ratio)
    out.file_bytes = weight_bytes
    return out


def _engine_rule(v: Variant, m: Machine) -> tuple[bool, str, int]:
    """(runnable, reason, engine preference: lower is better) for this variant on this machine."""
    if v.format == EXL2:
        if m.backend != "cuda":
            return False, "needs the ExLlama engine on an NVIDIA GPU", 9
        return False, "needs the ExLlama engine, which Hearth does not ship yet", 9
    if v.format == MLX:
        if m.backend == "metal":
            return True, "", 0
        return False, "MLX runs only on Apple Silicon at useful speed; use a GGUF here", 9
    if m.backend == "metal":
        return True, "", 1  # GGUF on Metal: second choice on a Mac
    return True, "", 0


def assess(
    variants: list[Variant],
    machine: Machine,
    *,
    n_ctx: int = 8192,
    options: LoadOptions | None = None,
    calibration: CalibrationStore | None = None,
) -> Recommendation:
    reference = next((v.spec for v in variants if v.spec is not None), None)
    out: list[Assessment] = []
    prefs: dict[int, int] = {}
    for v in variants:
        runnable, reason, pref = _engine_rule(v, machine)
        spec = v.spec or (scaled_spec(reference, v.size_bytes) if reference else None)
        kld = kld_for(v.label if v.format == GGUF else None, v.bpw or _bpw(v, spec))
        if spec is None:
            out.append(Assessment(v, None, None, kld, False, "the model's metadata could not be read"))
            continue
        if not has_weights(spec):
            out.append(Assessment(v, None, None, kld, False, "the file holds no model weights (no tensors)"))
            continue
        plan = plan_load(spec, machine, n_ctx=n_ctx, options=options)
        # The runs nearest this variant's size correct it: one factor for every size mis-corrects the others.
        corr = calibration.correction(machine.backend, spec.bytes_per_token_read) if calibration else Correction()
        speed = predict_speed(spec, plan, corr) if plan.fits else None
        if v.format == MLX and runnable and plan.fits and plan.verdict != "full_gpu":
            # MLX has no CPU fallback: all of it must fit the GPU's working set.
            runnable, reason = False, "does not fit the GPU's working set (MLX cannot split across CPU and GPU)"
        a = Assessment(v, plan, speed, kld, runnable, reason, spec=spec)
        if v.projector_memory is not None and plan.fits:
            a.projector = projector_fit(plan, v.projector_memory)
            a.image_s = image_seconds(spec, plan, v.projector_memory, corr)
            if not a.projector.fits and not a.reason:
                a.reason = "its vision projector does not fit beside it"
        prefs[id(a)] = pref
        out.append(a)
    pick, why = _pick(out, prefs, n_ctx)
    if pick is not None:
        pick.recommended = True
    return Recommendation(out, pick, why)


def _bpw(v: Variant, spec: ModelSpec | None) -> float | None:
    if spec and spec.n_params:
        return 8 * v.size_bytes / spec.n_params
    return None


def _in_brackets(label: str) -> str:
    """A verdict label inside a sentence: "Runs on the CPU" → "runs on the CPU" (not "runs on the cpu")."""
    return label[:1].lower() + label[1:]


def _plan(a: Assessment) -> Plan:
    """The plan of an assessment that has one (every variant that fits, or was planned at all)."""
    assert a.plan is not None
    return a.plan


def _pick(items: list[Assessment], prefs: dict[int, int], n_ctx: int) -> tuple[Assessment | None, str]:
    fits = [a for a in items if a.fits]
    if not fits:
        smallest = min((a for a in items if a.plan), key=lambda a: _plan(a).estimate.total, default=None)
        if smallest is None:
            return None, "no variant can run on this machine"
        return None, "nothing fits: " + _plan(smallest).explanation.splitlines()[-1].lstrip("→ ")
    floor = floor_kld()

    def quality(a: Assessment) -> float:
        # Above Q8_0 the gain is invisible and the cost is double the memory and half the speed.
        return max(a.kld, Q8_KLD) if a.kld is not None else 1.0

    def key(a: Assessment):
        verdict_rank = {"full_gpu": 0, "cpu": 0, "partial": 1}.get(_plan(a).verdict, 2)
        return (prefs.get(id(a), 5), verdict_rank, quality(a), a.variant.size_bytes)

    best_engine = min(prefs.get(id(a), 5) for a in fits)
    fits = [a for a in fits if prefs.get(id(a), 5) == best_engine]
    full_ctx = [a for a in fits if not _plan(a).ctx_reduced]
    good = [a for a in full_ctx if quality(a) <= floor]
    # Trade quality for speed only down to Q4_K_M; below that, quality loss is easy to notice.
    comfortable = [
        a for a in good if a.speed and a.speed.decode_tok_s >= COMFORTABLE_TOK_S and quality(a) <= BALANCED_KLD
    ]
    if comfortable:
        a = min(comfortable, key=key)
        why = f"best quality that fits at {_plan(a).options.n_ctx:,} context ({_in_brackets(_plan(a).label)})"
        # A better quant that fits too was passed over for speed: say so, or the pick reads as a mistake.
        slower = [
            b
            for b in full_ctx
            if quality(b) < quality(a) and b.speed is not None and b.speed.decode_tok_s < COMFORTABLE_TOK_S
        ]
        if slower:
            b = min(slower, key=quality)
            assert b.speed is not None
            why += (
                f" at a comfortable speed; {b.variant.label} also fits but would run at about "
                f"{b.speed.decode_tok_s:.1f} tok/s, below {COMFORTABLE_TOK_S:.0f}"
            )
        return a, why
    balanced = [a for a in good if quality(a) <= BALANCED_KLD]
    if balanced:
        # Nothing is fast here: a bigger quant would only be slower for a barely visible gain.
        a = max(balanced, key=lambda a: (a.speed.decode_tok_s if a.speed else 0.0, -quality(a)))
        return a, (
            f"fits at {_plan(a).options.n_ctx:,} context; the balanced choice, since no variant reaches "
            f"{COMFORTABLE_TOK_S:.0f} tok/s here"
        )
    if good:
        a = min(good, key=key)
        return a, f"best quality that fits at {_plan(a).options.n_ctx:,} context ({_in_brackets(_plan(a).label)})"
    # Lower the context before dropping below the floor quant (Q3_K_M).
    reduced = [a for a in fits if quality(a) <= floor]
    if reduced:
        a = max(reduced, key=lambda a: (_plan(a).options.n_ctx, -quality(a)))
        return a, (
            f"{a.variant.label} fits only at {_plan(a).options.n_ctx:,} context; preferred to a quant below "
            f"Q3 at {n_ctx:,}"
        )
    a = min(full_ctx or fits, key=key)
    return a, "only a low-quality quant fits; expect noticeably worse answers"
