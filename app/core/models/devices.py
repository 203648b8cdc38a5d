"""The memory pools a plan can use, read from a HardwareProfile's *live free* memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.hardware.pci_ids import CARVE_OUT_PLANNED
from app.core.hardware.profile import EngineAvailability, GpuInfo, HardwareProfile

GiB = 1024**3
MiB = 1024**2
# Keep this much of a GPU free: drivers, the desktop and other apps (llama.cpp --fit uses 1 GiB).
GPU_MARGIN = 1 * GiB
# Keep this much RAM for the OS and the app itself, or 10 % of RAM when that is larger.
RAM_MARGIN = 1 * GiB
RAM_MARGIN_FRACTION = 0.10

Backend = Literal["cpu", "cuda", "metal", "vulkan", "rocm"]
# What llama.cpp calls a backend's devices ("Vulkan0", "ROCm0"), and the system-info name of the backend.
DEVICE_PREFIX = {"cuda": "CUDA", "vulkan": "Vulkan", "rocm": "ROCm"}


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "CUDA0", "Vulkan0", "ROCm0", "Metal"
    kind: Literal["cpu", "cuda", "metal", "vulkan", "rocm"]
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
    llama_engine = profile.engine("llama.cpp")
    # The native canary may have turned llama.cpp's extra buffer types off here: then nothing is repacked.
    canary_off = llama_engine is not None and "extra_bufts" in llama_engine.turned_off
    repack = ("avx2" in simd or "dotprod" in simd or "i8mm" in simd) and not canary_off
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
    backend: Backend = "cpu"
    chosen: list[GpuInfo] = []
    if prefer_gpu:
        backend, chosen = _pick_gpus(profile, llama)
    if chosen and backend != "cpu":
        gpus = tuple(
            Device(
                f"{DEVICE_PREFIX[backend]}{i}",
                backend,
                g.memory_free_bytes,
                max(0, g.memory_free_bytes - GPU_MARGIN),
                g.bandwidth_gbps or (cpu_bw if g.integrated else None),
                "VRAM",
                model=g.name,
            )
            for i, g in enumerate(chosen)
        )
        fix = _rebuild_note(llama, backend, chosen)
        if fix:
            notes.append(fix)
        return Machine(backend, cpu, gpus, repack=repack, cores=cores, simd=simd, notes=tuple(notes))
    return Machine("cpu", cpu, (), repack=repack, cores=cores, simd=simd)


def _engine_backend(llama: EngineAvailability | None) -> str:
    """The installed llama.cpp's GPU backend, lower case ("cuda", "vulkan", "rocm", "cpu"), or "" if none."""
    if llama is None or not llama.available:
        return ""
    return (llama.backend or "cpu").lower() if llama.gpu_offload else "cpu"


def _pick_gpus(profile: HardwareProfile, llama: EngineAvailability | None) -> tuple[Backend, list[GpuInfo]]:
    """The backend to plan for and its GPUs: the one the installed engine drives when it drives any, else
    NVIDIA's (CUDA), else AMD's and Intel's discrete cards (Vulkan runs on both). Integrated GPUs share the
    CPU's RAM and bandwidth, so offloading to them saves no memory and little time: nothing goes there,
    except an AMD APU's big carve-out when there is no discrete GPU (`_planned_carve_out`)."""
    engine = _engine_backend(llama)
    nvidia = list(profile.nvidia.gpus)
    others = [g for g in profile.amd_intel.gpus if not g.integrated and g.memory_total_bytes > 0]
    if not nvidia and not others:
        # llama.cpp's Vulkan backend takes an iGPU only when there is no discrete one, and a carve-out is
        # memory the CPU cannot have: then it is planned as VRAM (read at the RAM's speed).
        others = [g for g in profile.amd_intel.gpus if g.integrated and _planned_carve_out(g)]
    amd = [g for g in others if g.vendor == "amd"]
    intel = [g for g in others if g.vendor == "intel"]
    if engine == "rocm" and amd:
        return "rocm", amd
    # SYCL is Intel's backend; Vulkan's class is the nearest the speed model has for it.
    if engine == "sycl" and intel:
        return "vulkan", intel
    # Vulkan drives any vendor; beside an NVIDIA card a Vulkan build is there for the AMD / Intel one.
    if engine == "vulkan" and (others or nvidia):
        return "vulkan", others or nvidia
    if nvidia:
        return "cuda", nvidia
    if others:
        return "vulkan", others
    return "cpu", []


def _planned_carve_out(g: GpuInfo) -> bool:
    """An AMD APU whose firmware set aside enough RAM as VRAM to be worth a plan (a Strix Halo's 64-96 GiB)."""
    return g.vendor == "amd" and g.memory_total_bytes >= CARVE_OUT_PLANNED


def _rebuild_note(llama: EngineAvailability | None, backend: str, gpus: list[GpuInfo]) -> str:
    """When the installed llama.cpp cannot drive the planned GPUs: what it is built for and the command that
    rebuilds it. The plan still counts the GPUs, since that is what the user gets after the rebuild."""
    engine = _engine_backend(llama)
    if not engine or engine == backend or (engine == "sycl" and all(g.vendor == "intel" for g in gpus)):
        return ""
    built_for = "the CPU" if engine == "cpu" else (llama.backend if llama is not None else None) or engine
    target = gpus[0].name + (f" and {len(gpus) - 1} more GPU{'s' if len(gpus) > 2 else ''}" if len(gpus) > 1 else "")
    fix = f"`make engine BACKEND={backend}` rebuilds it for the {target}"
    return f"the installed llama.cpp is built for {built_for}: {fix}"
