"""What makes a local run's numbers meaningful, gathered once: the model and its weights (with their
sha256), the engine and the flags it loaded with, and the planner's plan and prediction for this load
(made before loading, on the memory that was free then)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
from dataclasses import dataclass
from pathlib import Path

from app.core.bench.report import EngineFlags, EngineRecord, ModelRecord, Prediction, WeightsRecord
from app.core.engines.base import LoadSpec, ModelInfo
from app.core.formats import GGUF, MLX
from app.core.models.calibration import CalibrationStore, Correction
from app.core.models.devices import Machine
from app.core.models.gguf_split import split_shard_names
from app.core.models.memory import LoadOptions
from app.core.models.planner import Plan
from app.core.models.spec import ModelSpec
from app.core.models.speed import SpeedPrediction, predict_speed
from app.core.runtime.preflight import check_model, live_machine, plan_model

logger = logging.getLogger(__name__)

BATCHED_CONCURRENCY = "batched: up to {slots} requests decode together; more wait in the engine host's queue"
HOST_CONCURRENCY = "queued: Hearth's engine host runs one request at a time; concurrent requests wait in its queue"


@dataclass(frozen=True)
class Planned:
    """The planner's view of this load: its plan, the uncalibrated prediction (what calibration compares
    against) and the calibrated one (what `hearth fit` shows)."""

    spec: ModelSpec
    plan: Plan
    backend: str
    raw: SpeedPrediction
    shown: SpeedPrediction

    def prediction(self, position: int) -> Prediction:
        """At a conversation `position` tokens long: decode slows as the KV cache read grows."""
        return Prediction(
            decode_tok_s=decode_at(self.shown, position, self.plan.options.n_ctx),
            prefill_tok_s=self.shown.prefill_tok_s,
            memory_bytes=self.plan.estimate.total,
            basis=self.shown.basis,
        )

    def raw_decode_at(self, position: int) -> float:
        return decode_at(self.raw, position, self.plan.options.n_ctx) or 0.0


def decode_at(pred: SpeedPrediction, position: int, n_ctx: int) -> float | None:
    """Per-token time is linear in the KV read, so interpolate 1/tok/s between the empty and full context."""
    if pred.decode_tok_s <= 0 or pred.decode_tok_s_full_ctx <= 0 or n_ctx <= 1:
        return pred.decode_tok_s or None
    share = min(1.0, max(0.0, position / n_ctx))
    t = 1 / pred.decode_tok_s + (1 / pred.decode_tok_s_full_ctx - 1 / pred.decode_tok_s) * share
    return 1 / t


def plan_for(
    path: Path, fmt: str, load: LoadSpec, calibration: CalibrationStore | None, machine: Machine | None = None
) -> Planned | None:
    """Plan `load` as the host's preflight would; None for formats the planner does not know, or when the
    spec is too sparse to predict from."""
    try:
        spec = check_model(path, fmt)
    except Exception as exc:  # the load itself reports a bad file; the prediction just goes missing
        logger.info("no plan for %s: %s", path.name, exc)
        return None
    if spec is None:
        return None
    machine = machine or live_machine()
    options = LoadOptions(
        n_ctx=load.n_ctx,
        n_batch=load.n_batch,
        n_ubatch=min(load.n_ubatch, load.n_batch),
        cache_type_k=load.cache_type_k,
        cache_type_v=load.cache_type_v,
        flash_attn=load.flash_attn,
        use_mmap=load.use_mmap,
        n_gpu_layers=load.n_gpu_layers,
    )
    planned = plan_model(spec, machine, load.n_ctx, options, exact=True, label=path.name)
    plan = planned.plan
    backend = "cpu" if plan.verdict == "cpu" else machine.backend
    try:
        raw = predict_speed(spec, plan)
        corr = calibration.correction(backend, spec.bytes_per_token_read) if calibration is not None else Correction()
        shown = predict_speed(spec, plan, corr)
    except (ValueError, ZeroDivisionError) as exc:
        logger.info("no speed prediction for %s: %s", path.name, exc)
        return None
    return Planned(spec=spec, plan=plan, backend=backend, raw=raw, shown=shown)


def headroom(planned: Planned | None, machine: Machine | None = None) -> tuple[int | None, str | None]:
    """What a plan could still use now, with the model loaded: on the GPU(s) the plan puts layers on, else
    in RAM. (bytes, device name)."""
    try:
        machine = machine or live_machine()
    except Exception as exc:
        logger.info("no memory headroom: %s", exc)
        return None, None
    on_gpu = planned is not None and planned.plan.verdict in ("full_gpu", "partial") and machine.gpus
    devices = machine.gpus if on_gpu else (machine.cpu,)
    device = min(devices, key=lambda d: d.budget_bytes)
    return device.budget_bytes, device.name


def model_record(path: Path, info: ModelInfo | None, spec: ModelSpec | None, name: str | None = None) -> ModelRecord:
    arch = (spec.architecture if spec else "") or str((info.extra if info else {}).get("architecture") or "")
    return ModelRecord(
        name=name or (spec.name if spec and spec.name else "") or path.name,
        architecture=arch,
        parameters=spec.n_params if spec and spec.n_params else None,
        context_trained=spec.n_ctx_train if spec and spec.n_ctx_train else None,
    )


def weights_record(path: Path, fmt: str, spec: ModelSpec | None, *, sha256: str | None = None) -> WeightsRecord:
    """`sha256`: a digest already known (the library's); otherwise the (first) file is hashed here."""
    files = _files(path)
    size = sum(f.stat().st_size for f in files if f.is_file()) if files else None
    if sha256 is None and path.is_file():
        sha256 = file_sha256(path)
    return WeightsRecord(
        format=fmt,
        file_name=path.name,
        quant_type=(spec.file_type if spec else None) or None,
        file_size=size,
        sha256=sha256,
    )


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return [p for p in path.rglob("*") if p.is_file()]
    if not path.exists():
        return []
    return [path.with_name(n) for n in split_shard_names(path.name)]


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def engine_record(fmt: str, load: LoadSpec, info: ModelInfo | None, engine_name: str | None = None) -> EngineRecord:
    extra = info.extra if info else {}
    names: dict[str, str] = {GGUF: "llama.cpp", MLX: "mlx"}
    name = engine_name or names.get(fmt, fmt)
    version, build = engine_build(fmt)
    slots = int(extra.get("slots", load.slots) or 1)
    return EngineRecord(
        kind="host",
        name=name,
        version=version,
        build_info=build,
        flags=EngineFlags(
            n_ctx=info.n_ctx if info else load.n_ctx,
            gpu_layers=load.n_gpu_layers,
            threads=extra.get("n_threads", load.n_threads),
            flash_attention=load.flash_attn,
            kv_type_k=load.cache_type_k,
            kv_type_v=load.cache_type_v,
            n_batch=extra.get("n_batch", load.n_batch),
            n_ubatch=load.n_ubatch,
            slots=slots,
        ),
        concurrency_mode=HOST_CONCURRENCY if slots == 1 else BATCHED_CONCURRENCY.format(slots=slots),
    )


def engine_build(fmt: str) -> tuple[str | None, str | None]:
    """(version, build info) of the engine library behind `fmt`; what is unknown stays None."""
    packages: dict[str, str] = {GGUF: "llama_cpp_python", MLX: "mlx"}
    package = packages.get(fmt)
    if package is None:
        return None, None
    try:
        version = importlib.metadata.version(package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        version = None
    build = None
    if fmt == GGUF:
        try:
            from app.core.native import import_native

            raw = import_native("llama_cpp").llama_print_system_info()
            build = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip() or None
        except Exception as exc:  # an older binding without it, or a broken native build
            logger.debug("no llama.cpp system info: %s", exc)
    return version, build


def planned_load(
    path: Path, fmt: str, n_ctx: int, *, n_threads: int | None = None, n_gpu_layers: int | None = None
) -> LoadSpec:
    """How a benchmark loads `path` at exactly `n_ctx`: GPU layers, flash attention and KV type as the
    planner would choose them for a chat (what a user gets), `n_gpu_layers` overriding its choice."""
    spec = LoadSpec(path=path, n_ctx=n_ctx, n_threads=n_threads)
    try:
        model = check_model(path, fmt)
    except Exception as exc:  # the load reports it properly
        logger.info("no plan for %s: %s", path.name, exc)
        model = None
    if model is not None:
        opts = plan_model(model, live_machine(), n_ctx, LoadOptions(n_ctx=n_ctx), exact=True, label=path.name)
        o = opts.plan.options
        if opts.plan.fits:
            spec = spec.model_copy(
                update={
                    "n_gpu_layers": o.n_gpu_layers,
                    "flash_attn": o.flash_attn,
                    "cache_type_k": o.cache_type_k,
                    "cache_type_v": o.cache_type_v,
                }
            )
    if n_gpu_layers is not None:
        spec = spec.model_copy(update={"n_gpu_layers": n_gpu_layers})
    return spec
