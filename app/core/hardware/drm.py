"""AMD and Intel GPUs on Linux from /sys/class/drm, without vendor SDKs (NVIDIA is NVML's, in nvidia.py).

amdgpu reports dedicated VRAM in mem_info_vram_total / mem_info_vram_used; Intel discrete cards report
local memory through whichever file their driver and kernel have (see `_intel_vram`). Every file may be
missing or malformed: a card that cannot be read is skipped with a reason, never an exception.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from app.core.hardware.pci_ids import VENDOR_AMD, VENDOR_INTEL, build_gpu, hex4
from app.core.hardware.profile import AmdIntelInfo, GpuInfo

logger = logging.getLogger(__name__)

SYSFS_DRM = Path("/sys/class/drm")
_CARD = re.compile(r"^card(\d+)$")  # card0, not the connectors (card0-DP-1) nor render nodes


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if not text:
        return None
    try:
        value = int(text.split()[0], 0)
    except ValueError:
        logger.debug("malformed number in %s: %r", path, text[:40])
        return None
    return value if value >= 0 else None


def _driver(dev: Path) -> str:
    try:
        return os.path.basename(os.readlink(dev / "driver"))
    except OSError:
        return ""


def _uevent(dev: Path) -> dict[str, str]:
    lines = (_read(dev / "uevent") or "").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _intel_vram(card: Path, dev: Path) -> int | None:
    """Local memory of an Intel discrete GPU: the amdgpu-style file some kernels give, i915's lmem file, or
    the xe driver's per-tile sizes (summed: a multi-tile part has VRAM on each)."""
    for path in (dev / "mem_info_vram_total", dev / "lmem_total_bytes", card / "lmem_total_bytes"):
        value = _read_int(path)
        if value:
            return value
    tiles = [_read_int(p) for p in sorted(dev.glob("tile*/physical_vram_size_bytes"))]
    total = sum(t for t in tiles if t)
    return total or None


def _read_card(card: Path, index: int) -> GpuInfo | None:
    """The card's GPU, or None when it is not AMD or Intel (NVIDIA, virtual adapters)."""
    dev = card / "device"
    uevent = _uevent(dev)
    pci_id = uevent.get("PCI_ID", ":").split(":")
    vendor = hex4(_read(dev / "vendor")) or hex4(pci_id[0])
    device = hex4(_read(dev / "device")) or hex4(pci_id[1] if len(pci_id) > 1 else "")
    if vendor not in (VENDOR_AMD, VENDOR_INTEL):
        return None
    driver = _driver(dev) or uevent.get("DRIVER", "")
    revision = _read(dev / "revision") or ""
    notes: list[str] = []
    if vendor == VENDOR_AMD:
        total = _read_int(dev / "mem_info_vram_total")
        used = _read_int(dev / "mem_info_vram_used")
        if total is None and driver != "amdgpu":
            notes.append(f"driver {driver or 'unknown'} reports no VRAM (amdgpu does)")
    else:
        total = _intel_vram(card, dev)
        used = _read_int(dev / "mem_info_vram_used")
    if total and used is None:
        notes.append("VRAM in use is not reported, so all of it is counted free")
    hint = _read(dev / "product_name") or ""  # amdgpu's board FRU: often empty on consumer cards
    return build_gpu(
        index, vendor, device, revision=revision, name_hint=hint, total=total, used=used, driver=driver, notes=notes
    )


def probe_drm(root: Path = SYSFS_DRM) -> AmdIntelInfo:
    """AMD and Intel GPUs under `root` (a /sys/class/drm). Never raises."""
    info = AmdIntelInfo(source="sysfs")
    try:
        cards = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _CARD.match(p.name)))
    except OSError as exc:
        info.reason = f"no AMD or Intel GPU (cannot list {root}: {exc.strerror or exc})"
        return info
    seen: set[str] = set()
    problems: list[str] = []
    for _, card in cards:
        try:
            key = os.path.realpath(card / "device")
            if key in seen:  # one PCI device can show up as two cards (a display and a compute node)
                continue
            gpu = _read_card(card, len(info.gpus))
        except Exception as exc:  # a sysfs surprise must not cost the other cards
            logger.warning("could not read %s: %s", card, exc)
            problems.append(f"{card.name}: {exc}")
            continue
        if gpu is not None:
            seen.add(key)
            info.gpus.append(gpu)
    if problems:
        info.reason = "some GPUs could not be read: " + "; ".join(problems)
    elif not info.gpus:
        info.reason = "no AMD or Intel GPU"
    return info
