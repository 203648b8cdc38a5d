"""Speed model: decode is memory-bound, prefill compute-bound (fit-model.md "Decode speed").

t_token = Σ_devices bytes_read_on_device / (η × bandwidth) + t0, and bytes read per token are the
resident weights (active experts only) plus the KV cache up to the current position.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.models.calibration import Correction
from app.core.models.memory import kv_bytes_per_layer, kv_cells
from app.core.models.planner import Plan
from app.core.models.spec import ModelSpec

# η (share of peak bandwidth reached) and fixed per-token overhead t0 (s), per backend.
# CUDA/Metal: fitted on llama.cpp scoreboards (Llama-2-7B Q4_0 tg128). CPU: relative to the measured
# single-thread read bandwidth, which all cores together exceed (bench/fit_accuracy.py); 0.65 of a
# rated (table) bandwidth when nothing was measured.
ETA = {"cpu": 0.95, "cuda": 0.86, "metal": 0.84, "vulkan": 0.7}
ETA_CPU_RATED = 0.65
T0 = {"cpu": 0.1e-3, "cuda": 0.84e-3, "metal": 3.7e-3, "vulkan": 1.5e-3}
# Per layer on the CPU: ~15 graph ops, each ending in a thread barrier (small models are bound by this).
T_LAYER_CPU = 0.045e-3
# Per vocabulary entry per token: reading the logits and sampling on the host (any backend).
T_VOCAB = 80e-9
# On the CPU, how fast a weight type streams relative to 4-bit K/IQ quants: unquantized types need no
# dequantisation and use all cores' bandwidth; Q8_0 is in between (fitted with bench/fit_accuracy.py).
CPU_TYPE_SPEED = {"F32": 1.4, "F16": 1.4, "BF16": 1.4, "Q8_0": 1.1, "U8": 1.1}
# Prefill: share of peak FLOPS reached (calibrated from measured prompt tok/s).
ETA_COMPUTE = {"cpu": 0.30, "cuda": 0.45, "metal": 0.40, "vulkan": 0.3}
# Peak FLOPS when the table has none: GPU ≈ 120 FLOP per byte/s of bandwidth (fp16 tensor cores).
GPU_FLOPS_PER_BW = 120.0
CPU_CLOCK_HZ = 2.8e9


@dataclass(frozen=True)
class SpeedPrediction:
    decode_tok_s: float  # at the start of a conversation
    decode_tok_s_full_ctx: float  # when the context is full (KV read grows with position)
    prefill_tok_s: float
    basis: str  # "table bandwidth, uncalibrated", "measured bandwidth, calibrated on 3 runs"
    bytes_per_token: int
    bound_by: str  # which device dominates


def has_weights(spec: ModelSpec) -> bool:
    """Whether there is anything to predict: a file with no tensors (a vocabulary-only GGUF) reads no
    bytes per token, and the formula would answer billions of tokens a second."""
    return spec.weight_bytes > 0 and spec.n_layers > 0


def cpu_flops(cores: int, simd: tuple[str, ...] | list[str]) -> float:
    lanes = 16 if "avx512f" in simd else 8 if "avx2" in simd else 4  # f32 lanes per FMA
    return cores * CPU_CLOCK_HZ * lanes * 2 * 2  # 2 FMA units, 2 FLOP per FMA


def cpu_type_speed(spec: ModelSpec) -> float:
    """Byte-weighted harmonic mean of CPU_TYPE_SPEED over the model's tensor types (1.0 if unknown)."""
    total = sum(spec.tensor_types.values())
    if not total:
        return 1.0
    slow = sum(b / CPU_TYPE_SPEED.get(t.upper(), 1.0) for t, b in spec.tensor_types.items())
    return total / slow


def _active_share(spec: ModelSpec) -> float:
    return spec.n_expert_used / spec.n_expert if spec.is_moe else 1.0


def _layer_read_bytes(spec: ModelSpec, il: int) -> float:
    blk = spec.block_bytes[il] if il < len(spec.block_bytes) else 0
    exp = spec.expert_bytes[il] if il < len(spec.expert_bytes) else 0
    return (blk - exp) + exp * _active_share(spec)


def predict_speed(spec: ModelSpec, plan: Plan, correction: Correction | None = None) -> SpeedPrediction:
    m = plan.machine
    corr = correction or Correction()
    opts = plan.options
    cells = kv_cells(opts.n_ctx)
    gpu_first = spec.n_layers - min(plan.layers_on_gpu, spec.n_layers) if m.gpus else spec.n_layers
    out_on_gpu = bool(m.gpus) and plan.layers_on_gpu > spec.n_layers

    def per_device(position: int) -> dict[str, float]:
        read = {"cpu": 0.0, "gpu": 0.0}
        for il in range(spec.n_layers):
            where = "gpu" if il >= gpu_first and m.gpus else "cpu"
            kv_full = kv_bytes_per_layer(spec, il, cells, opts)
            read[where] += _layer_read_bytes(spec, il) + kv_full * min(position, cells) / max(cells, 1)
        read["gpu" if out_on_gpu else "cpu"] += spec.output_bytes + spec.other_bytes
        return read

    cpu_bw = (m.cpu.bandwidth_gbps or 20.0) * 1e9
    gpu_bw = ((m.gpus[0].bandwidth_gbps if m.gpus else None) or cpu_bw / 1e9) * 1e9
    backend = m.backend if m.gpus else "cpu"

    eta_cpu = (ETA["cpu"] if m.cpu.bandwidth_measured else ETA_CPU_RATED) * cpu_type_speed(spec)
    cpu_layers = min(spec.n_layers, gpu_first)
    fixed = T0[backend] + cpu_layers * T_LAYER_CPU + spec.n_vocab * T_VOCAB

    def t_token(position: int) -> tuple[float, float, float]:
        read = per_device(position)
        t_cpu = read["cpu"] / (eta_cpu * cpu_bw)
        t_gpu = read["gpu"] / (ETA[backend] * gpu_bw) if read["gpu"] else 0.0
        return t_cpu + t_gpu + fixed, t_cpu, t_gpu

    t_start, t_cpu, t_gpu = t_token(1)
    t_full, _, _ = t_token(cells)
    active_params = spec.n_params * (1.0 if not spec.is_moe else _moe_param_share(spec))
    if m.gpus and plan.layers_on_gpu:
        flops = gpu_bw * GPU_FLOPS_PER_BW
        eta_c = ETA_COMPUTE[backend]
        frac_gpu = min(1.0, plan.layers_on_gpu / max(1, spec.n_layers))
    else:
        flops, eta_c, frac_gpu = cpu_flops(m.cores, m.simd), ETA_COMPUTE["cpu"], 0.0
    cpu_f = cpu_flops(m.cores, m.simd) * ETA_COMPUTE["cpu"]
    gpu_f = flops * eta_c
    per_token_flops = 2 * max(1, active_params)
    t_prefill = per_token_flops * (frac_gpu / gpu_f + (1 - frac_gpu) / cpu_f) if frac_gpu else per_token_flops / cpu_f
    bw_basis = "measured bandwidth" if (m.cpu.bandwidth_measured and not m.gpus) else "table bandwidth"
    return SpeedPrediction(
        decode_tok_s=corr.decode / t_start,
        decode_tok_s_full_ctx=corr.decode / t_full,
        prefill_tok_s=corr.prefill / t_prefill,
        basis=f"{bw_basis}, {corr.basis}",
        bytes_per_token=int(sum(per_device(1).values())),
        bound_by="GPU" if t_gpu > t_cpu else "CPU",
    )


def _moe_param_share(spec: ModelSpec) -> float:
    total = sum(spec.block_bytes) or 1
    active = sum(_layer_read_bytes(spec, il) for il in range(spec.n_layers))
    return active / total
