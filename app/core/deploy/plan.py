"""A deployment plan: for a model and a target (GPU type and count, context, users, dtype or auto),
the layout that fits, the engine and its command, and the decode speed to expect."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from app.core.deploy.engines import (
    ENGINES,
    Engine,
    EngineChoice,
    Launch,
    choose_engines,
    dtype_for_request,
    dtype_label,
    dtype_ladder,
    launch_command,
)
from app.core.deploy.errors import PlanError
from app.core.deploy.shape import ModelShape
from app.core.deploy.sizing import (
    MAX_GPUS,
    GpuBudget,
    gpus_needed,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    smallest_layout,
    weight_bytes,
)
from app.core.deploy.speed import DecodeSpeed, predict_decode
from app.core.deploy.targets import Target

logger = logging.getLogger(__name__)

DTYPES = ("auto", "bf16", "fp8", "nvfp4", "int8", "int4")
MAX_USERS = 4096


@dataclass
class DeployPlan:
    shape: ModelShape
    target: Target
    gpus_available: int
    users: int
    ctx: int
    engine: Engine | None = None
    reason: str = ""
    dtype: str | None = None
    layout: GpuBudget | None = None  # the per-GPU budget of the layout that fits
    closest: GpuBudget | None = None  # when nothing fits: the best try on the GPUs given
    needed: GpuBudget | None = None  # when nothing fits: the layout on more GPUs that would
    launch: Launch | None = None
    speed: DecodeSpeed | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.layout is not None

    @property
    def kv_per_token(self) -> int:
        return kv_bytes_per_token(self.shape)

    @property
    def kv_total(self) -> int:
        return self.users * kv_bytes_per_sequence(self.shape, self.ctx)

    @property
    def weights_total(self) -> int:
        return weight_bytes(self.shape, self.dtype) if self.dtype else 0

    @property
    def verdict(self) -> str:
        """One sentence: what it takes, or why it does not fit."""
        t, n = self.target, self.gpus_available
        if self.layout is not None:
            lay = self.layout
            on = f"one {t.name}" if t.per_node == 1 else f"{lay.gpus} × {t.name} ({_where(lay)})"
            return f"fits on {on} in {dtype_label(self.dtype or '')} with {_users(self.users)} × {self.ctx:,} tokens"
        on = f"one {t.name}" if t.per_node == 1 else f"{n} × {t.name}"
        base = f"{self.shape.name} does not fit on {on} with {_users(self.users)} × {self.ctx:,} tokens"
        if self.dtype is None:
            return f"{base}: no weight format this hardware has kernels for"
        if self.needed is not None:
            return f"{base} in {dtype_label(self.dtype)}; it needs {self.needed.gpus} ({_where(self.needed)})"
        if t.per_node == 1:
            return f"{base} in {dtype_label(self.dtype)}; try fewer users, a shorter context or a bigger machine"
        return (
            f"{base} in {dtype_label(self.dtype)}, nor on any count of them up to {MAX_GPUS}; "
            "try fewer users or a shorter context"
        )


def engine_runs_on(engine: Engine, target: Target) -> bool:
    """MLX is Apple's; ExLlama needs CUDA; vLLM and SGLang serve NVIDIA and AMD GPUs, not Metal."""
    if engine == "mlx":
        return target.vendor == "apple"
    if engine == "exllama":
        return target.vendor == "nvidia"
    return engine == "llama.cpp" or target.vendor != "apple"


def _where(lay: GpuBudget) -> str:
    return f"TP {lay.tp}" + (f" × PP {lay.pp}" if lay.pp > 1 else "")


def _users(n: int) -> str:
    return "1 user" if n == 1 else f"{n} users"


def _check(shape: ModelShape, target: Target, gpus: int, users: int, ctx: int, dtype: str) -> None:
    if gpus < 1:
        raise PlanError("the GPU count must be at least 1")
    if target.per_node == 1 and gpus > 1:
        raise PlanError(f"{target.name} is one machine: plan it with --gpus 1")
    if not 1 <= users <= MAX_USERS:
        raise PlanError(f"users must be between 1 and {MAX_USERS:,} (got {users})")
    if ctx < 1:
        raise PlanError(f"the context must be at least 1 token (got {ctx})")
    if shape.max_ctx and ctx > shape.max_ctx:
        raise PlanError(f"a context of {ctx:,} is over {shape.name}'s maximum of {shape.max_ctx:,} tokens")
    if dtype not in DTYPES and not (shape.gguf_quants and dtype.upper() in {q.upper() for q in shape.gguf_quants}):
        raise PlanError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    native = shape.native_dtype
    if native.startswith("mlx") and target.vendor != "apple":
        raise PlanError(f"{shape.name} is an MLX conversion, which runs on Apple Silicon only; plan the original repo")
    if native.startswith("exl") and target.vendor != "nvidia":
        raise PlanError(f"{shape.name} is an EXL2/EXL3 quant, which runs on NVIDIA GPUs only; plan the original repo")
    if not shape.spec.n_layers:
        raise PlanError(f"{shape.name}: the model's layer count is unknown")


def make_plan(
    shape: ModelShape,
    target: Target,
    *,
    gpus: int,
    users: int,
    ctx: int,
    dtype: str = "auto",
    engine: Engine | None = None,
    shared_prefix: bool = False,
) -> DeployPlan:
    """The plan; a model that does not fit is a plan with `fits` False and a verdict that says why."""
    dtype = dtype.lower() if dtype.lower() in DTYPES else dtype
    _check(shape, target, gpus, users, ctx, dtype)
    if engine is not None and engine not in ENGINES:
        raise PlanError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine is not None and not engine_runs_on(engine, target):
        raise PlanError(f"{engine} does not run on {target.name}")
    choices = choose_engines(shape, target, gpus=gpus, users=users, shared_prefix=shared_prefix, dtype=dtype)
    if engine is not None:
        pick = next((c for c in choices if c.engine == engine), None)
        choices = [pick or EngineChoice(engine, f"{engine} was asked for")]
    plan = DeployPlan(shape, target, gpus, users, ctx)
    first: DeployPlan | None = None
    for choice in choices:
        tried = _plan_with(plan, choice, dtype)
        if tried.fits:
            if first is not None and first.engine != tried.engine:
                tried.notes.insert(0, f"{first.engine} would not fit ({first.verdict}); {tried.engine} does")
            return tried
        first = first or tried
    assert first is not None
    if first.dtype is None:  # no engine runs this format on this hardware: a wrong request, not a plan
        raise PlanError(first.notes[-1] if first.notes else first.verdict)
    return first


def _plan_with(base: DeployPlan, choice: EngineChoice, requested: str) -> DeployPlan:
    plan = DeployPlan(base.shape, base.target, base.gpus_available, base.users, base.ctx)
    plan.engine, plan.reason = choice.engine, choice.reason
    shape, target = plan.shape, plan.target
    ladder = dtype_ladder(choice.engine, shape, target)
    if requested != "auto":
        wanted = dtype_for_request(choice.engine, requested)
        if wanted is None or wanted not in ladder:
            runs = ", ".join(dtype_label(d) for d in ladder) or "nothing this model is stored in"
            if choice.engine == "llama.cpp" and shape.gguf_quants:
                plan.notes.append(f"{shape.name} has no {wanted or requested} GGUF (it has {runs})")
            else:
                plan.notes.append(f"{choice.engine} has no {requested} kernels on {target.name} (it runs {runs} there)")
            ladder = []
        else:
            ladder = [wanted]
    for dtype in ladder:
        fit, closest = smallest_layout(shape, target, dtype, gpus=plan.gpus_available, users=plan.users, ctx=plan.ctx)
        if fit is not None:
            plan.dtype, plan.layout = dtype, fit
            break
        # Nothing yet: the smallest format's numbers explain the failure, and how many GPUs it would take.
        plan.dtype, plan.closest = dtype, closest
    if plan.layout is None:
        if plan.dtype is not None:
            plan.needed = gpus_needed(shape, target, plan.dtype, users=plan.users, ctx=plan.ctx)
            best = gpus_needed(shape, target, ladder[0], users=plan.users, ctx=plan.ctx) if len(ladder) > 1 else None
            if best is not None:
                plan.notes.append(f"in {dtype_label(ladder[0])} it needs {best.gpus} ({_where(best)})")
        return plan
    lay = plan.layout
    assert plan.dtype is not None
    plan.launch = launch_command(
        choice.engine, shape, plan.dtype, tp=lay.tp, pp=lay.pp, ctx=plan.ctx, users=plan.users, target=target
    )
    plan.speed = predict_decode(shape, target, plan.dtype, tp=lay.tp, pp=lay.pp, users=plan.users, ctx=plan.ctx)
    spare = plan.gpus_available // lay.gpus
    if spare > 1 and choice.engine in ("vllm", "sglang"):
        plan.notes.append(
            f"{plan.gpus_available} GPUs hold {spare} copies of this layout: run {spare} replicas (data parallel) "
            "for more users"
        )
    return plan
