"""Decode speed of a deployment from the bandwidth model (fit-model.md "Decode speed"): every decode
step reads each GPU's weight shard once and every active user's KV cache; tok/s per user = 1 / step.

η per device class and the per-token and per-layer overheads are the fit view's own (app.core.models.speed,
fitted on llama.cpp scoreboards: datacenter NVIDIA and Apple Ultra parts reach a smaller share of their
rated bandwidth than consumer cards); tensor parallelism costs an all-reduce per layer, which a fast link
hides better than PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.deploy.shape import ModelShape
from app.core.deploy.sizing import kv_bytes_per_sequence, weight_bytes
from app.core.deploy.targets import Target
from app.core.models.compute import SpeedClass
from app.core.models.speed import ETA, ETA_COMPUTE, T0_LAYER, T0_TOKEN

# Share of single-GPU bandwidth efficiency kept at each TP degree (our assumption, one all-reduce per layer).
TP_EFFICIENCY = {
    True: {1: 1.0, 2: 0.95, 4: 0.9, 8: 0.85},  # NVLink / Infinity Fabric
    False: {1: 1.0, 2: 0.8, 4: 0.65, 8: 0.5},  # PCIe
}


@dataclass(frozen=True)
class DecodeSpeed:
    per_user_tok_s: float  # every user decoding at once, each at the full context
    aggregate_tok_s: float  # all users together
    single_user_tok_s: float  # one user alone at the start of a conversation
    bound_by: str  # "memory bandwidth" or "compute"
    efficiency: float  # η used, TP and class derating included
    basis: str


def speed_class(target: Target) -> SpeedClass:
    """The fit view's device class for a target. AMD's MI300X has no class of its own: it is rated like
    the other HBM datacenter parts (the NVIDIA ones), which is the closest measured behaviour."""
    if target.vendor == "apple":
        return "apple_ultra" if "ultra" in target.id else "apple_max"
    return "nvidia_datacenter" if target.cls == "datacenter" else "nvidia_consumer"


def efficiency(target: Target, tp: int) -> float:
    return ETA[speed_class(target)] * TP_EFFICIENCY[target.fast_link].get(tp, 0.5)


def _step_seconds(
    shape: ModelShape, target: Target, dtype: str, *, tp: int, pp: int, users: int, ctx: int
) -> tuple[float, str]:
    eta = efficiency(target, tp)
    backend = "metal" if target.vendor == "apple" else "cuda"
    shards = tp * pp
    active = shape.active_params / max(1, shape.n_params)
    weights = weight_bytes(shape, dtype) * active / shards
    kv_seq = kv_bytes_per_sequence(shape, ctx) / (pp if shape.spec.kv_lora_rank else shards)
    stage_mem = (weights + users * kv_seq) / (eta * target.bandwidth_gbps * 1e9)
    stage_flops = 2 * shape.active_params * users / shards
    stage_compute = stage_flops / (ETA_COMPUTE[speed_class(target)] * target.bf16_tflops * 1e12)
    bound = "compute" if stage_compute > stage_mem else "memory bandwidth"
    # One token passes every pipeline stage in turn.
    overhead = T0_TOKEN + T0_LAYER[backend] * shape.spec.n_layers  # launches and syncs, every layer
    return pp * max(stage_mem, stage_compute) + overhead, bound


def predict_decode(
    shape: ModelShape, target: Target, dtype: str, *, tp: int, pp: int, users: int, ctx: int
) -> DecodeSpeed:
    step, bound = _step_seconds(shape, target, dtype, tp=tp, pp=pp, users=users, ctx=ctx)
    alone, _ = _step_seconds(shape, target, dtype, tp=tp, pp=pp, users=1, ctx=1)
    eta = efficiency(target, tp)
    return DecodeSpeed(
        per_user_tok_s=1 / step,
        aggregate_tok_s=users / step,
        single_user_tok_s=1 / alone,
        bound_by=bound,
        efficiency=eta,
        basis=f"table bandwidth {target.bandwidth_gbps:,.0f} GB/s × η {eta:.2f}, uncalibrated",
    )
