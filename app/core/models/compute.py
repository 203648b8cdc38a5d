"""What a device can do per second beyond its bandwidth: its speed class and its peak FLOPS.

The class picks the share of rated bandwidth decode reaches (docs/speed-model.md says why each differs);
the FLOPS figure, from resources/hardware.json, bounds prefill.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from app.core.hardware.bandwidth import load_table, lookup_in_table
from app.core.models.devices import Device

SpeedClass = Literal[
    "cpu",
    "nvidia_consumer",
    "nvidia_datacenter",
    "apple_base",
    "apple_pro",
    "apple_max",
    "apple_ultra",
    "vulkan",
]
SPEED_CLASSES: tuple[SpeedClass, ...] = get_args(SpeedClass)  # the same names, in order, to iterate
_APPLE_TIER: dict[str, SpeedClass] = {"pro": "apple_pro", "max": "apple_max", "ultra": "apple_ultra"}
# Without a table figure: tensor-core GPUs sit near 120 FLOP per byte/s of bandwidth (RTX 3060 142,
# RTX 4090 328, H100 SXM 295): a deliberately low guess, so an unknown card is not promised a fast prefill.
GPU_FLOPS_PER_BW = 120.0
# Apple GPU cores do 128 FP32 (= FP16) lanes x 2 FLOP per clock; 327 GFLOPS per core is the M1's 1.28 GHz.
APPLE_DEFAULT_GFLOPS_PER_CORE = 327.0
APPLE_DEFAULT_CORES = 8


def _words(name: str) -> list[str]:
    return re.sub(r"[^0-9a-z]+", " ", name.lower()).split()


def is_hbm_gpu(name: str) -> bool:
    """Whether the NVIDIA part has HBM (V100, A100, A30, H100, H200...): the datacenter class."""
    words = _words(name)
    for key in load_table().get("gpu_hbm", []):
        want = _words(key)
        if any(words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1)):
            return True
    return False


def speed_class(device: Device, backend: str) -> SpeedClass:
    """The class whose bandwidth efficiency applies to `device` under `backend`."""
    if device.kind == "cpu" or backend == "cpu":
        return "cpu"
    if backend == "vulkan":
        return "vulkan"
    if device.kind == "metal" or backend == "metal":
        words = _words(device.model)
        for word, cls in _APPLE_TIER.items():
            if word in words:
                return cls
        return "apple_base"
    return "nvidia_datacenter" if is_hbm_gpu(device.model) else "nvidia_consumer"


def peak_flops(device: Device) -> float:
    """Peak FP16 FLOP/s of a GPU or Apple chip: the table's figure, else an estimate from bandwidth/cores."""
    if device.kind == "metal":
        per_core = lookup_in_table(device.model, "apple_gpu_gflops_per_core").gbps or APPLE_DEFAULT_GFLOPS_PER_CORE
        cores = device.gpu_cores or lookup_in_table(device.model, "apple_gpu_cores").gbps or APPLE_DEFAULT_CORES
        return per_core * 1e9 * cores
    tflops = lookup_in_table(device.model, "gpu_fp16_tflops").gbps
    if tflops:
        return tflops * 1e12
    return (device.bandwidth_gbps or 100.0) * 1e9 * GPU_FLOPS_PER_BW
