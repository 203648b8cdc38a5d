"""Speed model: decode is memory-bound, prefill compute-bound (docs/speed-model.md has every constant's why).

Decode, per token: t = Σ_devices bytes_read / (η_class × bandwidth) + T0_TOKEN + layers × T0_LAYER + t_host,
where bytes read are the resident weights (active experts only) plus the KV cache up to the current position,
η depends on the device class (consumer or datacenter NVIDIA, Apple base/Pro/Max/Ultra, CPU), and t_host is
the logits copy and sampling over the vocabulary on the CPU.
Prefill, per prompt token: (2 × active params + attention FLOPs at that prompt length) / (η_c × peak FLOPS).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.hardware.quant_speed import QuantSpeeds, measured_cpu_speeds
from app.core.models.calibration import Correction
from app.core.models.compute import SpeedClass, peak_flops, speed_class
from app.core.models.devices import Device, Machine
from app.core.models.memory import kv_bytes_per_layer, kv_cells
from app.core.models.planner import Plan
from app.core.models.projector import ProjectorMemory
from app.core.models.spec import ModelSpec

# Share of rated bandwidth a decode step reaches, per device class. GPU classes: fitted on llama.cpp
# scoreboard rows (Llama-2-7B Q4_0 tg128) by bench/speed_scoreboard.py --fit. CPU: relative to the measured
# read bandwidth (bench/fit_accuracy.py); ETA_CPU_RATED of a table figure when nothing was measured.
ETA: dict[SpeedClass, float] = {
    "cpu": 0.95,
    "nvidia_consumer": 0.858,
    "nvidia_datacenter": 0.615,
    "apple_base": 0.888,
    "apple_pro": 0.928,
    "apple_max": 0.908,
    "apple_ultra": 0.794,
    # Vulkan (and ROCm, see _class): below CUDA's 0.858 because its matrix-vector shaders are generic across
    # vendors. 0.7 with T0_LAYER["vulkan"] predicts 5-11 % above RX 5700 XT Vulkan tg128 on
    # llama 7B Q4_0 (65.2 tok/s, llama.cpp PR #13324) and RX 7900 XTX ROCm tg64 on llama 8B Q4_K_M (105.8,
    # llama.cpp PR #26284); the RX 9070 XT decodes ~20 % faster on Vulkan than on ROCm (lmstudio-bug-tracker #574).
    "vulkan": 0.7,
}
ETA_CPU_RATED = 0.65
# Fixed time per decoded token on the host (graph build, llama_decode's bookkeeping), any backend (s).
T0_TOKEN = 0.1e-3
# Per GPU layer per decoded token (s): kernel launches, dispatch and synchronisation, which grow with the
# number of ops, i.e. with layers. Fitted with ETA; vulkan: the old 1.5 ms per token over 32 layers, which
# ROCm shares (HIP launches cost about what Vulkan dispatches do on the same Radeon).
T0_LAYER = {"cuda": 0.0327e-3, "metal": 0.163e-3, "vulkan": 0.047e-3, "rocm": 0.047e-3}
# Per layer on the CPU: ~15 graph ops, each ending in a thread barrier (small models are bound by this).
T_LAYER_CPU = 0.045e-3
# Host work per vocabulary entry per token, on the CPU whatever the backend (s), measured on this project's
# 2-core EPYC VM with bench/speed_scoreboard.py --measure-here: the sampler chain Hearth builds (top-k first,
# then top-p, min-p, temperature, dist) plus llama-cpp-python's copy of the logits row.
HOST_SAMPLE_S_PER_ENTRY = 0.77e-9
HOST_COPY_S_PER_ENTRY = 0.05e-9
# Moving the logits row off a discrete GPU: 4 bytes per entry over PCIe (~12 GB/s for small transfers).
LOGITS_PCIE_BPS = 12e9
# On the CPU, how fast a weight type streams relative to 4-bit K/IQ quants (used until the quant probe has
# measured this CPU: bench/quant_probe.py): unquantized types need no
# dequantisation and use all cores' bandwidth; Q8_0 is in between (fitted with bench/fit_accuracy.py). Q4_1
# has no REPACK kernel and dequantises on the slow path: 0.61-0.64 of Q4_K_M in two runs of
# `bench/fit_accuracy.py --type-speed` here (the flat per-vocabulary charge used to hide this on SmolLM2).
CPU_TYPE_SPEED = {"F32": 1.4, "F16": 1.4, "BF16": 1.4, "Q8_0": 1.1, "U8": 1.1, "Q4_1": 0.62}
# Prefill: share of peak FP16 FLOPS reached, per device class; fitted on the scoreboards' pp512 (median).
ETA_COMPUTE: dict[SpeedClass, float] = {
    "cpu": 0.30,
    "nvidia_consumer": 0.503,
    "nvidia_datacenter": 0.285,
    "apple_base": 0.695,
    "apple_pro": 0.71,
    "apple_max": 0.702,
    "apple_ultra": 0.654,
    "vulkan": 0.3,
}
# Attention (QK^T, softmax, PV) runs this many times slower per FLOP than the weight matmuls: measured here
# from prompt tok/s at two prompt lengths (bench/speed_scoreboard.py --measure-here).
ATTN_SLOWDOWN = 2.8
PREFILL_TOKENS = 512  # what a prefill figure means when nobody says (llama-bench's pp512)
CPU_CLOCK_HZ = 2.8e9


@dataclass(frozen=True)
class SpeedPrediction:
    decode_tok_s: float  # at the start of a conversation
    decode_tok_s_full_ctx: float  # when the context is full (KV read grows with position)
    prefill_tok_s: float  # for a PREFILL_TOKENS prompt (or the one asked for)
    basis: str  # "table bandwidth, uncalibrated", "decode rates measured on this CPU, calibrated on 3 runs"
    bytes_per_token: int
    bound_by: str  # which device dominates
    speed_class: str = ""  # the class whose η applied ("nvidia_consumer", "apple_max", "cpu", ...)


def _class(device: Device, backend: str) -> SpeedClass:
    """compute.speed_class, with ROCm given Vulkan's class: on Radeons the two decode within ~20 % of each
    other (see ETA), while the CUDA classes it would otherwise fall into were fitted on NVIDIA silicon."""
    return speed_class(device, "vulkan" if backend == "rocm" else backend)


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
    return total / sum(b / CPU_TYPE_SPEED.get(t.upper(), 1.0) for t, b in spec.tensor_types.items())


def cpu_read_rate(spec: ModelSpec, m: Machine, measured: QuantSpeeds | None = None) -> float:
    """Bytes/s the CPU streams this model's weights at while decoding. With the quant probe's figures for
    this CPU (`measured`): the byte-weighted harmonic mean of each type's measured rate, a type the probe
    did not measure keeping its table ratio to the measured Q4_K. Without: η × read bandwidth × the table."""
    bandwidth = (m.cpu.bandwidth_gbps or 20.0) * 1e9
    table = (ETA["cpu"] if m.cpu.bandwidth_measured else ETA_CPU_RATED) * bandwidth
    rates = {t.upper(): v * 1e9 for t, v in (measured.rates_gbps if measured else {}).items() if v > 0}
    if not rates:
        return table * cpu_type_speed(spec)
    anchor = rates.get("Q4_K", table)
    total = sum(spec.tensor_types.values())
    if not total:
        return anchor

    def rate(t: str) -> float:
        return rates.get(t) or anchor * CPU_TYPE_SPEED.get(t, 1.0)

    return total / sum(b / rate(t.upper()) for t, b in spec.tensor_types.items())


def cpu_layer_seconds(measured: QuantSpeeds | None) -> float:
    """Per CPU layer per decoded token: as the quant probe measured it here, else T_LAYER_CPU."""
    return measured.layer_s if measured is not None and measured.layer_s else T_LAYER_CPU


def _active_share(spec: ModelSpec) -> float:
    return spec.n_expert_used / spec.n_expert if spec.is_moe else 1.0


def _layer_read_bytes(spec: ModelSpec, il: int) -> float:
    blk = spec.block_bytes[il] if il < len(spec.block_bytes) else 0
    exp = spec.expert_bytes[il] if il < len(spec.expert_bytes) else 0
    return (blk - exp) + exp * _active_share(spec)


def host_seconds(spec: ModelSpec, plan: Plan, *, sampling: bool = True) -> float:
    """Per token on the CPU: the logits row copied off the device, then (when sampling) the sampler over it.
    Not scaled per CPU: the profile has no per-core speed (docs/speed-model.md); calibration absorbs it."""
    m = plan.machine
    per_entry = HOST_COPY_S_PER_ENTRY + (HOST_SAMPLE_S_PER_ENTRY if sampling else 0.0)
    pcie = 4 * spec.n_vocab / LOGITS_PCIE_BPS if m.gpus and not m.unified and plan.layers_on_gpu else 0.0
    return spec.n_vocab * per_entry + pcie


@dataclass(frozen=True)
class _Decode:
    seconds: float
    cpu_s: float
    gpu_s: float


def _gpu_first_layer(spec: ModelSpec, plan: Plan) -> int:
    m = plan.machine
    return spec.n_layers - min(plan.layers_on_gpu, spec.n_layers) if m.gpus else spec.n_layers


def _decode(
    spec: ModelSpec, plan: Plan, position: float, sampling: bool, measured: QuantSpeeds | None = None
) -> _Decode:
    """`measured`: this CPU's quant-probe figures when the caller has read them (else read here)."""
    m = plan.machine
    opts = plan.options
    cells = kv_cells(opts.n_ctx)
    gpu_first = _gpu_first_layer(spec, plan)
    out_on_gpu = bool(m.gpus) and plan.layers_on_gpu > spec.n_layers
    read = {"cpu": 0.0, "gpu": 0.0}
    for il in range(spec.n_layers):
        where = "gpu" if il >= gpu_first and m.gpus else "cpu"
        kv_full = kv_bytes_per_layer(spec, il, cells, opts)
        read[where] += _layer_read_bytes(spec, il) + kv_full * min(position, cells) / max(cells, 1)
    read["gpu" if out_on_gpu else "cpu"] += spec.output_bytes + spec.other_bytes

    cpu_bw = (m.cpu.bandwidth_gbps or 20.0) * 1e9
    backend = m.backend if m.gpus else "cpu"
    # Per weight type and per layer: measured on this CPU when the quant probe has run (hardware/quant_speed.py).
    if measured is None and read["cpu"]:
        measured = measured_cpu_speeds(m.simd)
    t_cpu = read["cpu"] / cpu_read_rate(spec, m, measured) if read["cpu"] else 0.0
    t_gpu = 0.0
    if read["gpu"]:
        gpu = m.gpus[0]
        gpu_bw = (gpu.bandwidth_gbps or cpu_bw / 1e9) * 1e9
        t_gpu = read["gpu"] / (ETA[_class(gpu, backend)] * gpu_bw)
    gpu_layers = spec.n_layers - min(spec.n_layers, gpu_first)
    fixed = (
        T0_TOKEN
        + gpu_layers * T0_LAYER.get(backend, 0.0)
        + min(spec.n_layers, gpu_first) * cpu_layer_seconds(measured)
        + host_seconds(spec, plan, sampling=sampling)
    )
    return _Decode(t_cpu + t_gpu + fixed, t_cpu, t_gpu)


def decode_seconds(spec: ModelSpec, plan: Plan, position: float = 1, *, sampling: bool = True) -> float:
    """Seconds for one decoded token with `position` tokens already in the KV cache (uncalibrated).
    `sampling=False` is llama-bench's tg test: logits are computed and copied, nobody samples."""
    return _decode(spec, plan, position, sampling).seconds


def attention_flops_per_token(spec: ModelSpec, n_prompt: int) -> float:
    """QK^T and PV for an average token of an `n_prompt` prompt read from an empty cache: each token
    attends to the ones before it (n/2 on average), or to its sliding window."""
    flops = 0.0
    for il in range(spec.n_layers):
        heads = spec.n_head if spec.kv_heads(il) else 0
        span = n_prompt / 2
        if spec.swa_layers and il < len(spec.swa_layers) and spec.swa_layers[il] and spec.sliding_window:
            span = min(span, spec.sliding_window)
        flops += 2 * heads * (spec.head_dim_k + spec.head_dim_v) * span
    return flops


def prefill_seconds_per_token(spec: ModelSpec, plan: Plan, n_prompt: int = PREFILL_TOKENS) -> float:
    """Seconds per prompt token for an `n_prompt`-token prompt (uncalibrated)."""
    m = plan.machine
    active_params = spec.n_params * (1.0 if not spec.is_moe else _moe_param_share(spec))
    work = 2 * max(1, active_params) + ATTN_SLOWDOWN * attention_flops_per_token(spec, max(1, n_prompt))
    cpu_f = cpu_flops(m.cores, m.simd) * ETA_COMPUTE["cpu"]
    if m.gpus and plan.layers_on_gpu:
        gpu_f = peak_flops(m.gpus[0]) * ETA_COMPUTE[_class(m.gpus[0], m.backend)]
        frac_gpu = min(1.0, plan.layers_on_gpu / max(1, spec.n_layers))
        return work * (frac_gpu / gpu_f + (1 - frac_gpu) / cpu_f)
    return work / cpu_f


def image_seconds(
    spec: ModelSpec, plan: Plan, projector: ProjectorMemory, correction: Correction | None = None
) -> float | None:
    """Seconds to read one image: the encoder over its patches, on the device libmtmd puts it (the first GPU
    when the model is offloaded, else the CPU), then the model's prefill of the tokens it becomes. None when
    the projector's header gave no work to time."""
    if projector.encoder_flops <= 0:
        return None
    m = plan.machine
    if m.gpus and plan.options.n_gpu_layers != 0:
        device_flops = peak_flops(m.gpus[0]) * ETA_COMPUTE[_class(m.gpus[0], m.backend)]
    else:
        device_flops = cpu_flops(m.cores, m.simd) * ETA_COMPUTE["cpu"]
    tokens = max(1, projector.tokens_per_image)
    prefill = tokens * prefill_seconds_per_token(spec, plan, tokens) / (correction or Correction()).prefill
    return projector.encoder_flops / device_flops + prefill


def predict_speed(
    spec: ModelSpec,
    plan: Plan,
    correction: Correction | None = None,
    *,
    prompt_tokens: int = PREFILL_TOKENS,
    sampling: bool = True,
) -> SpeedPrediction:
    m = plan.machine
    corr = correction or Correction()
    measured = measured_cpu_speeds(m.simd)  # read once for both positions and the basis
    start = _decode(spec, plan, 1, sampling, measured)
    full = _decode(spec, plan, kv_cells(plan.options.n_ctx), sampling, measured)
    t_prefill = prefill_seconds_per_token(spec, plan, prompt_tokens)
    backend = m.backend if m.gpus else "cpu"
    cls = _class(m.gpus[0], backend) if m.gpus and plan.layers_on_gpu else "cpu"
    if not m.gpus and measured is not None:
        bw_basis = "decode rates measured on this CPU"
    else:
        bw_basis = "measured bandwidth" if (m.cpu.bandwidth_measured and not m.gpus) else "table bandwidth"
    return SpeedPrediction(
        decode_tok_s=corr.decode / start.seconds,
        decode_tok_s_full_ctx=corr.decode / full.seconds,
        prefill_tok_s=corr.prefill / t_prefill,
        basis=f"{bw_basis}, {corr.basis}",
        bytes_per_token=int(_bytes_read(spec, plan)),
        bound_by="GPU" if start.gpu_s > start.cpu_s else "CPU",
        speed_class=cls,
    )


def _bytes_read(spec: ModelSpec, plan: Plan) -> float:
    opts = plan.options
    cells = kv_cells(opts.n_ctx)
    kv = sum(kv_bytes_per_layer(spec, il, cells, opts) for il in range(spec.n_layers)) / max(cells, 1)
    weights = sum(_layer_read_bytes(spec, il) for il in range(spec.n_layers))
    return weights + kv + spec.output_bytes + spec.other_bytes


def _moe_param_share(spec: ModelSpec) -> float:
    total = sum(spec.block_bytes) or 1
    active = sum(_layer_read_bytes(spec, il) for il in range(spec.n_layers))
    return active / total
