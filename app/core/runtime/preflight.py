"""Checks before a load, in pure Python before native code sees the model: validate the file
(T5 GGUF, T6 MLX folder) and refuse a load the planner says will not fit in free memory (T27).
`plan_model` is the one planning step (plan + predicted speed), also used for the chat's load defaults."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from app.core.engines.base import LoadSpec
from app.core.engines.registry import abilities, format_claiming
from app.core.errors import HearthError
from app.core.formats import GGUF, MLX
from app.core.models.devices import Machine
from app.core.models.errors import ModelFileError
from app.core.models.gguf_split import split_shard_names
from app.core.models.hf_config import check_folder_configs
from app.core.models.memory import LoadOptions
from app.core.models.planner import Plan
from app.core.models.spec import ModelSpec

logger = logging.getLogger(__name__)

DEFAULT_CTX = 8192  # the context a load asks for by default; the planner lowers it to what fits
FALLBACK_CTX = 4096  # when the model does not say how long it was trained


class LoadRefused(HearthError):
    """The planner says the model will not fit; the message carries its explanation. A 400 on the API:
    the request asked for more than this machine holds (never a 500: nothing broke)."""

    code = "does_not_fit"


class ModelLimitReached(LoadRefused):
    """Loading one more model would break the cap on loaded models (Settings, `serve --max-models`), and
    the models in the way are pinned."""

    code = "model_limit"


@dataclass
class PreflightResult:
    spec: ModelSpec | None = None
    plan: Plan | None = None
    predicted_decode_tok_s: float = 0.0  # uncalibrated, as the calibration store wants it
    backend: str = "cpu"
    predicted_prefill_tok_s: float = 0.0  # uncalibrated, for a PREFILL_TOKENS prompt

    def prefill_tok_s_at(self, n_prompt: int) -> float:
        """Uncalibrated prefill tok/s for an `n_prompt`-token prompt: the attention term grows with the
        prompt, so a run is compared with the prediction for its own length. 0.0 when nothing predicts."""
        if self.spec is None or self.plan is None or n_prompt <= 0:
            return self.predicted_prefill_tok_s
        from app.core.models.speed import prefill_seconds_per_token

        try:
            return 1.0 / prefill_seconds_per_token(self.spec, self.plan, n_prompt)
        except (ValueError, ZeroDivisionError) as exc:  # a spec too sparse to predict from
            logger.debug("no prefill prediction: %s", exc)
            return 0.0


@dataclass(frozen=True)
class PlannedLoad:
    plan: Plan
    predicted_decode_tok_s: float  # 0.0 when the spec is too sparse to predict from
    predicted_prefill_tok_s: float = 0.0  # uncalibrated, for a PREFILL_TOKENS prompt


class Preflight(Protocol):
    def __call__(self, spec: LoadSpec, fmt: str, plan_check: bool) -> PreflightResult: ...


class ReloadCheck(Protocol):
    def __call__(self, spec: LoadSpec, fmt: str, loaded: PreflightResult | None) -> None:
        """Before the model loaded now (`loaded`: its check) is let go for `spec`, a new load of the same file:
        raise LoadRefused if `spec` cannot fit even once it is gone, so a refusal changes nothing."""
        ...


def format_for_path(path: str | Path) -> str:
    """The format of a model path: a plug-in's that claims it, an MLX folder, a .gguf file; else ModelFileError."""
    p = Path(path).expanduser()
    if (plugin := format_claiming(p)) is not None:
        return plugin
    if p.is_dir():
        return MLX
    if p.is_file() and p.suffix.lower() == ".gguf":
        return GGUF
    if not p.exists():
        raise ModelFileError(f"{p} does not exist (give a .gguf file or an MLX model folder)")
    raise ModelFileError(f"{p.name} is not a GGUF file or an MLX model folder")


def check_gguf(path: Path) -> ModelSpec:
    """Validate every shard (T5) and return the model's spec."""
    from app.core.models.gguf import validate_gguf
    from app.core.models.spec import spec_from_gguf

    names = split_shard_names(path.name)
    headers = []
    for name in names:
        shard = path.with_name(name)
        if not shard.is_file():
            raise ModelFileError(f"shard {name} of {path.name} is missing")
        headers.append(validate_gguf(shard))
    return spec_from_gguf(headers if len(headers) > 1 else headers[0])


def check_mlx_folder(folder: Path) -> ModelSpec:
    """T6: no Python files anywhere in the folder, no config asking for remote code."""
    if not folder.is_dir():
        raise ModelFileError(f"{folder} is not a folder")
    code = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.py"))
    if code:
        raise ModelFileError(
            f"this model folder contains Python code ({', '.join(code[:3])}); Hearth never runs code from a model"
        )
    check_folder_configs(folder)
    from app.core.models.mlx_meta import read_mlx_folder

    return read_mlx_folder(folder).spec


def live_machine() -> Machine:
    """This machine's pools from live free memory (bandwidth from the cache only: no measuring)."""
    from app.core.hardware import probe_hardware
    from app.core.models.devices import machine_from_profile
    from app.core.paths import app_paths

    profile = probe_hardware(cache_dir=app_paths().cache, measure_bandwidth=False)
    return machine_from_profile(profile)


def check_model(path: Path, fmt: str) -> ModelSpec | None:
    """Validate a model file or folder (T5, T6) and return its spec; None for a plug-in format
    (those validate themselves)."""
    path = Path(path).expanduser()
    if fmt == GGUF:
        if not path.is_file():
            raise ModelFileError(f"{path} is not a file")
        return check_gguf(path)
    if fmt == MLX:
        return check_mlx_folder(path)
    return None


def default_context(model: ModelSpec) -> int:
    """The context a load asks for when the user has not chosen one."""
    return min(DEFAULT_CTX, model.n_ctx_train) if model.n_ctx_train else FALLBACK_CTX


def plan_model(
    model: ModelSpec,
    machine: Machine,
    n_ctx: int,
    options: LoadOptions | None = None,
    *,
    exact: bool = False,
    label: str = "",
    max_slots: int | None = None,
) -> PlannedLoad:
    """Plan `model` on `machine` at up to `n_ctx` (exactly `n_ctx` with `exact`: the planner must
    not quietly plan a smaller context than is loaded), and predict its decode speed. `max_slots`: as
    many parallel slots as fit beside that context, up to this many (None: `options.n_seq` as given)."""
    from app.core.models.planner import MIN_CONTEXT, plan_load
    from app.core.models.speed import predict_speed

    plan = plan_load(
        model,
        machine,
        n_ctx=n_ctx,
        options=options or LoadOptions(n_ctx=n_ctx),
        min_ctx=n_ctx if exact else MIN_CONTEXT,
        max_slots=max_slots,
        within_trained=not exact,
    )
    try:
        predicted = predict_speed(model, plan)
    except (ValueError, ZeroDivisionError) as exc:  # a spec too sparse to predict from
        logger.debug("no speed prediction for %s: %s", label or "the model", exc)
        return PlannedLoad(plan, 0.0)
    return PlannedLoad(plan, predicted.decode_tok_s, predicted.prefill_tok_s)


PROMPT_CACHE_MIB = LoadSpec.model_fields["prompt_cache_mib"].default  # the most a load keeps in RAM


def prompt_cache_mib(plan: Plan) -> int:
    """RAM for sequence states evicted from slots: the usual budget, or what the plan leaves free in RAM
    if that is less (the planner's budget holds the model; the cache must not push it out)."""
    m = plan.machine
    cpu = plan.estimate.device("CPU")
    used = plan.estimate.total if m.unified else (cpu.total if cpu is not None else 0)
    return int(min(PROMPT_CACHE_MIB, max(0, m.cpu.budget_bytes - used) // (1024 * 1024)))


def spec_from_plan(path: Path, plan: Plan) -> LoadSpec:
    """The load a plan describes: its context, offload, KV cache and slots (each with its own cells),
    a prompt cache that fits beside them, and speculative decoding as planned."""
    opts = plan.options
    return LoadSpec(
        path=path,
        n_ctx=opts.n_ctx,
        n_gpu_layers=opts.n_gpu_layers,
        flash_attn=opts.flash_attn,
        cache_type_k=opts.cache_type_k,
        cache_type_v=opts.cache_type_v,
        slots=opts.n_seq,
        kv_unified=opts.kv_unified if opts.n_seq > 1 else False,
        prompt_cache_mib=prompt_cache_mib(plan) if opts.n_seq > 1 else PROMPT_CACHE_MIB,
        speculative=PLANNED_SPECULATION,
    )


# Speculative decoding as planned: n-gram drafting ("auto") on every machine. The plan cannot tell whether
# drafts pay (that depends on the text as much as the hardware); "auto" measures it as it runs, sizing each
# draft by the step cost measured on this machine and the kept share of drafts (engines/decoding/draft_cost.py), and
# drafts nothing where nothing pays. bench/speculative.py: 1.91x plain decoding on a 2-core CPU where the
# model hands a file back, 1.11x on a rewrite, 1.03x on prose.
PLANNED_SPECULATION: Literal["auto"] = "auto"


def speculation_for(fmt: str, asked: str | None) -> str:
    """The n-gram drafting mode a load of `fmt` runs with: as `asked` (settings.load_speculative), else as
    planned; off but for GGUF, as llama.cpp is the only engine that drafts from n-grams (MLX drafts only
    with a draft model, a choice of its own)."""
    if not abilities(fmt).ngram:
        return "off"
    return asked or PLANNED_SPECULATION


class DefaultPreflight:
    """Validation then the fit check. `machine` is injectable (tests simulate a small machine)."""

    def __init__(self, machine: Callable[[], Machine] = live_machine) -> None:
        self.machine = machine

    def __call__(self, spec: LoadSpec, fmt: str, plan_check: bool) -> PreflightResult:
        path = Path(spec.path).expanduser()
        model = check_model(path, fmt)
        if model is None:
            return PreflightResult()  # plug-in formats validate themselves
        if not plan_check:
            return PreflightResult(spec=model)
        return fit_check(model, spec, self.machine(), path.name)

    def check_reload(self, spec: LoadSpec, fmt: str, loaded: PreflightResult | None) -> None:
        model = loaded.spec if loaded is not None and loaded.spec is not None else check_model(spec.path, fmt)
        if model is None:
            return
        from app.core.runtime.residency import beside, holding_of

        mapped = fmt == GGUF and spec.use_mmap
        going = holding_of(loaded.plan.estimate if loaded and loaded.plan else None, mapped=mapped, loaded=True)
        fit_check(model, spec, beside(self.machine(), [], [going]), Path(spec.path).name)


def planned_load(model: ModelSpec, spec: LoadSpec, machine: Machine, label: str = "") -> PlannedLoad:
    """`spec` planned on `machine` at exactly its context, slots and cache types (fitting or not)."""
    options = LoadOptions(
        n_ctx=spec.n_ctx,
        n_batch=spec.n_batch,
        n_ubatch=min(spec.n_ubatch, spec.n_batch),
        cache_type_k=spec.cache_type_k,
        cache_type_v=spec.cache_type_v,
        flash_attn=spec.flash_attn,
        use_mmap=spec.use_mmap,
        extra_bufts=spec.extra_bufts,
        embeddings=spec.embedding,
        n_seq=1 if spec.embedding else spec.slots,
        kv_unified=spec.kv_unified,
    )
    return plan_model(model, machine, spec.n_ctx, options, exact=True, label=label)


def check_projector(plan: Plan, path: Path, label: str) -> None:
    """Refuse (LoadRefused) a vision projector that does not fit beside the planned model."""
    from app.core.models.planner import projector_fit
    from app.core.models.projector import projector_memory

    try:
        memory = projector_memory(path)
    except (ModelFileError, OSError) as exc:
        raise LoadRefused(f"the vision projector {path.name} cannot be read: {exc}") from exc
    fit = projector_fit(plan, memory, path.name)
    if not fit.fits:
        logger.warning("refusing to load %s with its projector %s: they will not fit", label, path.name)
        raise LoadRefused(f"{label} with its vision projector will not fit in free memory: {fit.line}")


def fit_check(model: ModelSpec, spec: LoadSpec, machine: Machine, label: str) -> PreflightResult:
    """Plan at exactly the requested context; raise LoadRefused with the planner's explanation."""
    planned = planned_load(model, spec, machine, label)
    plan = planned.plan
    if not plan.fits:
        logger.warning("refusing to load %s: it will not fit", label)
        raise LoadRefused(f"{label} will not fit in free memory:\n{plan.explanation}")
    if spec.speculative == "draft" and spec.draft_model is not None:
        from app.core.models.planner import draft_fit

        draft = Path(spec.draft_model).expanduser()
        draft_spec = check_model(draft, format_for_path(draft))
        fit = draft_fit(plan, draft_spec, draft.name) if draft_spec is not None else None
        if fit is not None and not fit.fits:
            logger.warning("refusing to load %s with the draft model %s: they will not fit", label, draft.name)
            raise LoadRefused(f"{label} with its draft model will not fit in free memory: {fit.line}")
    if spec.projector is not None:
        check_projector(plan, Path(spec.projector), label)
    backend = "cpu" if plan.verdict == "cpu" else machine.backend
    return PreflightResult(
        spec=model,
        plan=plan,
        predicted_decode_tok_s=planned.predicted_decode_tok_s,
        backend=backend,
        predicted_prefill_tok_s=planned.predicted_prefill_tok_s,
    )
