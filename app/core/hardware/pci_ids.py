"""AMD and Intel GPUs by PCI id: names, integrated or discrete, and one GpuInfo built the same way
whichever OS reported the card (Linux sysfs, the Windows registry, macOS system_profiler)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.hardware.bandwidth import TABLE_PATH, load_table, lookup_gpu_bandwidth
from app.core.hardware.profile import GpuInfo

GiB = 1024**3
VENDOR_AMD = "1002"
VENDOR_INTEL = "8086"
VENDOR_NVIDIA = "10de"
VENDOR_NAMES = {VENDOR_AMD: "amd", VENDOR_INTEL: "intel", VENDOR_NVIDIA: "nvidia"}
_VENDOR_LABEL = {VENDOR_AMD: "AMD", VENDOR_INTEL: "Intel"}
# An AMD part Hearth does not know with less VRAM than this is an APU's carve-out, not a card: no discrete
# card this small can hold a layer after the 1 GiB margin anyway.
APU_VRAM_BELOW = 1 * GiB
INTEGRATED_NOTE = "integrated: shares system RAM, so Hearth plans for the CPU instead"
# An AMD APU's VRAM is RAM the firmware set aside at boot, which the OS cannot use: from this size up (a
# Strix Halo's 64-96 GiB) it is planned as the GPU's memory when no discrete card is there.
CARVE_OUT_PLANNED = 4 * GiB
CARVE_OUT_NOTE = "integrated: its VRAM is system RAM set aside at boot, planned for when there is no discrete GPU"


def hex4(value: str | int | None) -> str:
    """ "0x744C", "744c", 0x744C → "744c"; "" when unreadable."""
    if value is None:
        return ""
    try:
        number = value if isinstance(value, int) else int(str(value).strip(), 16)
    except ValueError:
        return ""
    return f"{number:04x}" if 0 <= number <= 0xFFFF else ""


@dataclass(frozen=True)
class PciName:
    name: str | None  # None: not in the table
    discrete: bool | None  # True / False when the table knows, None otherwise


def lookup_pci(vendor: str, device: str, revision: str = "", path: Path = TABLE_PATH) -> PciName:
    """The table's name for vendor:device (revision picks among cards sharing one id)."""
    table = load_table(path)
    entry: Any = table.get("pci_gpus", {}).get(vendor, {}).get(device)
    integrated = device in table.get("pci_integrated", {}).get(vendor, [])
    if isinstance(entry, dict):
        entry = entry.get(hex4(revision)[2:] if revision else "", entry.get(""))
    if isinstance(entry, str):
        return PciName(entry, not integrated)
    if integrated:
        return PciName(None, False)
    # The Intel section lists only discrete parts: every other Intel GPU is built into the CPU.
    return PciName(None, False if vendor == VENDOR_INTEL else None)


def build_gpu(
    index: int,
    vendor: str,
    device: str,
    *,
    revision: str = "",
    name_hint: str = "",
    total: int | None = None,
    used: int | None = None,
    driver: str = "",
    notes: list[str] | None = None,
    prefer_hint: bool = False,
) -> GpuInfo:
    """One AMD or Intel GPU. `name_hint` is what the OS calls it (product_name, DriverDesc); the table's name
    wins unless `prefer_hint` (a driver's marketing name is better than the table's generic fallback)."""
    notes = list(notes or [])
    pci = lookup_pci(vendor, device, revision)
    label = _VENDOR_LABEL.get(vendor, "GPU")
    kind = "integrated GPU" if pci.discrete is False else "GPU"
    fallback = f"{label} {kind} 0x{device or '????'}"
    name = (name_hint or pci.name) if prefer_hint else (pci.name or name_hint)
    gpu = GpuInfo(index=index, name=name or fallback, vendor=VENDOR_NAMES.get(vendor, vendor))
    gpu.driver = driver
    gpu.pci_id = f"{vendor}:{device}" if device else ""
    gpu.memory_total_bytes = max(0, total or 0)
    gpu.memory_used_bytes = min(max(0, used or 0), gpu.memory_total_bytes)
    gpu.memory_free_bytes = gpu.memory_total_bytes - gpu.memory_used_bytes
    discrete = pci.discrete
    if discrete is None:
        discrete = gpu.memory_total_bytes >= APU_VRAM_BELOW
    if vendor == VENDOR_INTEL and gpu.memory_total_bytes >= APU_VRAM_BELOW:
        discrete = True  # local memory read from the driver: an Arc whatever the table says
    gpu.integrated = not discrete
    if gpu.integrated:
        carve_out = vendor == VENDOR_AMD and gpu.memory_total_bytes >= CARVE_OUT_PLANNED
        notes.insert(0, CARVE_OUT_NOTE if carve_out else INTEGRATED_NOTE)
    else:
        bw = lookup_gpu_bandwidth(gpu.name)
        gpu.bandwidth_gbps = bw.gbps
        if bw.gbps is None:
            notes.append(bw.note)
        if not gpu.memory_total_bytes:
            notes.append("its VRAM could not be read, so nothing is planned onto it")
    gpu.note = "; ".join(n for n in notes if n)
    return gpu
