"""Bytes per GPU for a deployment: weights at a dtype, the KV cache for users × context, a reserve for
activations and the runtime, against the share of memory the engine is given; and the smallest
tensor-/pipeline-parallel layout that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.deploy.shape import ModelShape
from app.core.deploy.targets import Target
from app.core.models.memory import LoadOptions, kv_bytes_per_layer
from app.core.models.quality import kld_for
from app.core.resources import load_json

GiB = 1024**3
# Bytes per parameter of the quantized linear layers (embeddings and the output head stay 16-bit):
# FP8 one byte; NVFP4 4 bits + one FP8 scale per 16 values = 4.5 bits; AWQ/GPTQ 4 bits + a 16-bit scale
# and 4-bit zero per 128 ≈ 4.2 bits, ~0.53 B with the unquantized norms.
DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "int4": 0.53}
# mlx-lm quantizes the embeddings too, with a 16-bit scale and bias per group of 64: bits + 0.5 per weight.
MLX_GROUP_BITS = 32 / 64
# EXL3 (ExLlamaV3) quants are a free bits-per-weight; these are the sizes usually published.
EXL_BPWS = (8.0, 6.0, 5.0, 4.0, 3.0)
# Per GPU: CUDA context, NCCL buffers and CUDA graphs (vLLM's "non-torch" memory), then the activations
# of one batch of prefill tokens (vLLM's default max-num-batched-tokens).
RUNTIME_RESERVE = 1 * GiB
BATCH_TOKENS = 8192
KV_BYTES = 2.0  # the cache in the model's 16-bit dtype (vLLM's and SGLang's default kv-cache-dtype)
TP_DEGREES = (1, 2, 4, 8)


def gguf_bpw(label: str) -> float | None:
    """A GGUF quant's whole-file bits per weight from quants.json (None when it is not listed)."""
    for e in load_json("quants.json")["ladder"]:
        if e["quant"].upper() == label.upper():
            return float(e["bpw"])
    return None


def weight_bytes(shape: ModelShape, dtype: str) -> int:
    """All the model's weights at `dtype`: bf16, fp8, nvfp4, int4, mlx8/mlx4, exl<bpw>, or a GGUF label."""
    if dtype in shape.gguf_quants:
        return shape.gguf_quants[dtype]
    if dtype == "bf16":
        return int(shape.n_params * 2)
    if dtype in DTYPE_BYTES:
        return int((shape.n_params - shape.embed_params) * DTYPE_BYTES[dtype] + shape.embed_params * 2)
    if dtype.startswith("exl"):
        return int(shape.n_params * float(dtype[3:]) / 8)
    if dtype.startswith("mlx"):
        return int(shape.n_params * (int(dtype[3:]) + MLX_GROUP_BITS) / 8)
    bpw = gguf_bpw(dtype)
    if bpw is None:
        raise ValueError(f"no size known for dtype {dtype!r}")
    return int(shape.n_params * bpw / 8)


def dtype_quality(dtype: str) -> float:
    """KLD-like rank of a dtype (lower is closer to the original): orders the auto choice."""
    fixed = {"bf16": 0.0, "fp8": 0.001, "mlx8": 0.0014, "nvfp4": 0.02, "int4": 0.03, "mlx4": 0.036}
    if dtype in fixed:
        return fixed[dtype]
    if dtype.startswith("exl"):
        return kld_for(None, float(dtype[3:])) or 1.0
    if dtype.startswith("mlx"):
        return kld_for(None, int(dtype[3:]) + MLX_GROUP_BITS) or 1.0
    return kld_for(dtype) or 1.0


_F16 = LoadOptions(n_ctx=1, cache_type_k="f16", cache_type_v="f16", swa_full=True)


def kv_bytes_per_token_layers(shape: ModelShape) -> list[int]:
    """Per layer, the KV bytes one token adds at 16 bits, from the fit view's memory model
    (GQA heads × head dims × K and V; MLA: the latent plus the rope part, once)."""
    spec = shape.spec
    return [kv_bytes_per_layer(spec, il, 1, _F16) for il in range(spec.n_layers)]


def kv_bytes_per_token(shape: ModelShape) -> int:
    return sum(kv_bytes_per_token_layers(shape))


def kv_bytes_per_sequence(shape: ModelShape, ctx: int) -> int:
    """One sequence at `ctx` tokens: sliding-window layers keep only the last `window` tokens."""
    spec = shape.spec
    total = 0
    for il, per_token in enumerate(kv_bytes_per_token_layers(shape)):
        sliding = spec.sliding_window and il < len(spec.swa_layers) and spec.swa_layers[il]
        total += per_token * (min(ctx, spec.sliding_window) if sliding else ctx)
    return total + spec.recurrent_state_bytes


def attention_heads_for_tp(shape: ModelShape) -> int:
    """What a TP degree must divide: the KV heads (GQA), or the query heads with MLA, whose one latent
    is replicated on every GPU."""
    spec = shape.spec
    if spec.kv_lora_rank:
        return spec.n_head
    return max([h for h in spec.n_head_kv if h] or [spec.n_head])


def valid_tp(shape: ModelShape, target: Target) -> list[int]:
    heads = attention_heads_for_tp(shape)
    return [t for t in TP_DEGREES if t <= target.per_node and heads % t == 0 and shape.spec.n_head % t == 0]


@dataclass(frozen=True)
class GpuBudget:
    """One GPU's share under a layout: what it holds and what it may use."""

    tp: int
    pp: int
    weights: int
    kv: int
    reserve: int
    usable: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.reserve

    @property
    def fits(self) -> bool:
        return self.total <= self.usable

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def per_gpu(shape: ModelShape, target: Target, dtype: str, *, tp: int, pp: int, users: int, ctx: int) -> GpuBudget:
    shards = tp * pp
    kv_total = users * kv_bytes_per_sequence(shape, ctx)
    # Heads split across TP and layers across PP; an MLA latent is replicated across TP.
    kv = kv_total // (pp if shape.spec.kv_lora_rank else shards)
    spec = shape.spec
    # A prefill batch's 16-bit activations: the residual stream and attention/FFN inputs (~4 × hidden,
    # replicated) and the gated FFN's two intermediate halves (split by TP).
    activations = int(BATCH_TOKENS * 2 * (4 * spec.n_embd + 2 * spec.n_ff / tp))
    return GpuBudget(
        tp=tp,
        pp=pp,
        weights=-(-weight_bytes(shape, dtype) // shards),
        kv=kv,
        reserve=RUNTIME_RESERVE + activations,
        usable=target.usable_bytes,
    )


def smallest_layout(
    shape: ModelShape, target: Target, dtype: str, *, gpus: int, users: int, ctx: int
) -> tuple[GpuBudget | None, GpuBudget]:
    """(the first layout that fits on at most `gpus` devices, the closest try). TP grows first inside a
    node (power of two dividing the heads); past that, pipeline stages are added across nodes."""
    tps = valid_tp(shape, target) or [1]
    tried: GpuBudget | None = None
    for tp in tps:
        if tp > gpus:
            break
        tried = per_gpu(shape, target, dtype, tp=tp, pp=1, users=users, ctx=ctx)
        if tried.fits:
            return tried, tried
    tp = max([t for t in tps if t <= gpus] or [1])
    for pp in range(2, min(gpus // tp, shape.spec.n_layers) + 1):
        tried = per_gpu(shape, target, dtype, tp=tp, pp=pp, users=users, ctx=ctx)
        if tried.fits:
            return tried, tried
    return None, tried or per_gpu(shape, target, dtype, tp=1, pp=1, users=users, ctx=ctx)


MAX_GPUS = 64  # how far a "does not fit" answer looks for the count that would


def gpus_needed(shape: ModelShape, target: Target, dtype: str, *, users: int, ctx: int) -> GpuBudget | None:
    """The smallest layout on any count up to MAX_GPUS (single-device targets: one)."""
    limit = 1 if target.per_node == 1 else MAX_GPUS
    found, _ = smallest_layout(shape, target, dtype, gpus=limit, users=users, ctx=ctx)
    return found
