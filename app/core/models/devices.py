"""The memory pools a plan can use, read from a HardwareProfile's *live free* memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.hardware.profile import HardwareProfile

GiB = 1024**3
MiB = 1024**2
# Keep this much of a GPU free: drivers, the desktop and other apps (llama.cpp --fit uses 1 GiB).
GPU_MARGIN = 1 * GiB
# Keep this much RAM for the OS and the app itself, or 10 % of RAM when that is larger.
RAM_MARGIN = 1 * GiB
RAM_MARGIN_FRACTION = 0.10

Backend = Literal["cpu", "cuda", "metal", "vulkan"]


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "CUDA0", "Metal"
    kind: Literal["cpu", "cuda", "metal"]
    free_bytes: int  # free now
    budget_bytes: int  # what a plan may use: free minus the safety margin (Apple: ≤ the working set)
    bandwidth_gbps: float | None
    label: str = ""  # "RAM", "VRAM", "unified memory"
    bandwidth_measured: bool = False  # measured on this machine, not from the table
    model: str = ""  # the hardware's own name ("NVIDIA GeForce RTX 4090", "Apple M2 Max"): picks the speed class
    gpu_cores: int | None = None  # Apple: GPU cores as probed (prefill scales with them)


@dataclass(frozen=True)
class Machine:
    backend: Backend
    cpu: Device
    gpus: tuple[Device, ...] = ()
    repack: bool = False  # the CPU has llama.cpp's REPACK kernels (AVX2 / Arm dotprod)
    unified: bool = False  # Apple: GPU and CPU share one pool
    cores: int = 1
    simd: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def ram_budget(available: int, total: int) -> int:
    return max(0, available - max(RAM_MARGIN, int(total * RAM_MARGIN_FRACTION)))


def machine_from_profile(profile: HardwareProfile, *, prefer_gpu: bool = True) -> Machine:
    simd = tuple(profile.cpu.simd)
    repack = "avx2" in simd or "dotprod" in simd or "i8mm" in simd
    mem = profile.memory
    bw = profile.bandwidth
    cpu_bw = bw.cpu_measured_gbps or bw.cpu_table_gbps
    cpu = Device(
        "CPU",
        "cpu",
        mem.available_bytes,
        ram_budget(mem.available_bytes, mem.total_bytes),
        cpu_bw,
        "RAM",
        bandwidth_measured=bw.cpu_measured_gbps is not None,
    )
    cores = profile.cpu.physical_cores or profile.cpu.logical_cores or 1
    notes: list[str] = []
    llama = profile.engine("llama.cpp")
    if profile.apple is not None and prefer_gpu:
        a = profile.apple
        # Unified memory: Metal may keep at most the working set; both pools draw on the same free RAM.
        budget = min(a.gpu_working_set_bytes or mem.total_bytes, cpu.budget_bytes)
        metal = Device(
            "Metal",
            "metal",
            mem.available_bytes,
            budget,
            a.bandwidth_gbps or cpu_bw,
            "unified memory",
            model=a.chip,
            gpu_cores=a.gpu_cores,
        )
        cpu = Device("CPU", "cpu", mem.available_bytes, cpu.budget_bytes, a.bandwidth_gbps or cpu_bw, "RAM")
        return Machine("metal", cpu, (metal,), repack=repack, unified=True, cores=cores, simd=simd)
    if profile.gpus and prefer_gpu:
        gpus = tuple(
            Device(
                f"CUDA{g.index}",
                "cuda",
                g.memory_free_bytes,
                max(0, g.memory_free_bytes - GPU_MARGIN),
                g.bandwidth_gbps,
                "VRAM",
                model=g.name,
            )
            for g in profile.gpus
        )
        if llama is not None and llama.available and not llama.gpu_offload:
            notes.append("the installed llama-cpp-python has no GPU support: reinstall it with CUDA to use the GPU")
        return Machine("cuda", cpu, gpus, repack=repack, cores=cores, simd=simd, notes=tuple(notes))
    return Machine("cpu", cpu, (), repack=repack, cores=cores, simd=simd)
