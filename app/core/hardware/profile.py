"""What this machine is: the facts the planner, recommender and Hardware page consume."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass
class CpuInfo:
    brand: str = ""
    arch: str = ""
    physical_cores: int | None = None
    logical_cores: int | None = None
    simd: list[str] = field(default_factory=list)  # normalised names: "avx2", "avx512f", "neon", ...
    note: str = ""  # why something is unknown


@dataclass
class MemoryInfo:
    total_bytes: int = 0
    available_bytes: int = 0
    swap_total_bytes: int = 0
    swap_free_bytes: int = 0


@dataclass
class GpuInfo:
    index: int
    name: str
    vendor: str = "nvidia"
    memory_total_bytes: int = 0
    memory_free_bytes: int = 0
    memory_used_bytes: int = 0
    compute_capability: str | None = None  # "8.9"
    bandwidth_gbps: float | None = None  # from resources/hardware.json
    note: str = ""
    integrated: bool = False  # shares system RAM (an iGPU or APU): Hearth plans nothing onto it
    driver: str = ""  # AMD / Intel: the kernel or Windows driver ("amdgpu", "i915", "xe")
    pci_id: str = ""  # "1002:744c"


@dataclass
class NvidiaInfo:
    available: bool = False
    reason: str = ""  # why no GPU is listed ("no NVIDIA driver", "NVML error: ...")
    driver_version: str | None = None
    cuda_version: str | None = None  # "12.4"
    gpus: list[GpuInfo] = field(default_factory=list)


@dataclass
class AmdIntelInfo:
    """AMD and Intel GPUs, read without vendor SDKs (Linux sysfs, the Windows registry, macOS system_profiler)."""

    source: str = ""  # "sysfs", "registry", "system_profiler"
    reason: str = ""  # why none is listed, or what could not be read
    gpus: list[GpuInfo] = field(default_factory=list)


@dataclass
class AppleInfo:
    chip: str = ""  # "Apple M2 Max"
    unified_memory_bytes: int = 0
    gpu_cores: int | None = None
    gpu_working_set_bytes: int = 0  # what Metal lets the GPU keep resident
    working_set_source: str = ""  # "iogpu.wired_limit_mb", "mlx", "estimate (2/3 of RAM)"
    bandwidth_gbps: float | None = None


@dataclass
class BandwidthInfo:
    cpu_table_gbps: float | None = None  # from the DDR rule or chip table, when known
    cpu_measured_gbps: float | None = None  # numpy read test, cached per machine
    measured_at: float | None = None  # unix time of the measurement
    note: str = ""


@dataclass
class EngineAvailability:
    name: str  # "llama.cpp", "mlx"
    available: bool
    version: str | None = None
    backend: str | None = None  # "CPU", "CUDA", "Metal", "Vulkan"
    gpu_offload: bool = False
    reason: str = ""  # why not available
    note: str = ""  # extra facts when available ("MLX runs on the CPU only on this platform")
    # Risky features the native canary turned off for this build on this machine (native_checks.FEATURES).
    turned_off: list[str] = field(default_factory=list)


@dataclass
class HardwareProfile:
    os: str = ""
    os_version: str = ""
    arch: str = ""
    cpu: CpuInfo = field(default_factory=CpuInfo)
    memory: MemoryInfo = field(default_factory=MemoryInfo)
    nvidia: NvidiaInfo = field(default_factory=NvidiaInfo)
    amd_intel: AmdIntelInfo = field(default_factory=AmdIntelInfo)
    apple: AppleInfo | None = None
    bandwidth: BandwidthInfo = field(default_factory=BandwidthInfo)
    engines: list[EngineAvailability] = field(default_factory=list)
    probe_ms: float = 0.0
    warnings: list[str] = field(default_factory=list)  # probes that timed out or failed, with the reason

    @property
    def gpus(self) -> list[GpuInfo]:
        """Every GPU: NVIDIA's (NVML) first, then AMD's and Intel's, integrated ones included."""
        return [*self.nvidia.gpus, *self.amd_intel.gpus]

    def engine(self, name: str) -> EngineAvailability | None:
        return next((e for e in self.engines if e.name == name), None)

    def at_rest(self) -> HardwareProfile:
        """This machine as if nothing else held memory: all its RAM available, each GPU's VRAM free. What it
        can run, the same on every launch: free memory moves by the minute (other apps, the page cache,
        models loaded), and a count of what "runs here" taken from it changed between two launches."""

        def rested(g: GpuInfo) -> GpuInfo:
            return replace(g, memory_free_bytes=g.memory_total_bytes, memory_used_bytes=0)

        return replace(
            self,
            memory=replace(self.memory, available_bytes=self.memory.total_bytes or self.memory.available_bytes),
            nvidia=replace(self.nvidia, gpus=[rested(g) for g in self.nvidia.gpus]),
            amd_intel=replace(self.amd_intel, gpus=[rested(g) for g in self.amd_intel.gpus]),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareProfile:
        nv = d.get("nvidia") or {}
        ai = d.get("amd_intel") or {}  # absent in profiles saved before AMD / Intel were probed
        apple = d.get("apple")
        return cls(
            os=d.get("os", ""),
            os_version=d.get("os_version", ""),
            arch=d.get("arch", ""),
            cpu=CpuInfo(**(d.get("cpu") or {})),
            memory=MemoryInfo(**(d.get("memory") or {})),
            nvidia=NvidiaInfo(**{**nv, "gpus": [GpuInfo(**g) for g in nv.get("gpus", [])]}),
            amd_intel=AmdIntelInfo(**{**ai, "gpus": [GpuInfo(**g) for g in ai.get("gpus", [])]}),
            apple=AppleInfo(**apple) if apple else None,
            bandwidth=BandwidthInfo(**(d.get("bandwidth") or {})),
            engines=[EngineAvailability(**e) for e in d.get("engines", [])],
            probe_ms=d.get("probe_ms", 0.0),
            warnings=list(d.get("warnings", [])),
        )
