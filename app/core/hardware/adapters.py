"""AMD and Intel GPUs on Windows (the display-adapter class in the registry) and on Intel Macs
(`system_profiler SPDisplaysDataType -json`). Both sit behind an injectable reader so tests feed them data;
neither reports VRAM in use, so all of it is counted free and the planner's margin is the only slack."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from collections.abc import Callable
from typing import Any

from app.core.hardware.pci_ids import INTEGRATED_NOTE, VENDOR_AMD, VENDOR_INTEL, build_gpu, hex4
from app.core.hardware.profile import AmdIntelInfo
from app.core.native import import_native

logger = logging.getLogger(__name__)

# {4d36e968-...}: the Display adapters device class; one numbered subkey per installed adapter.
DISPLAY_CLASS_KEY = r"SYSTEM\CurrentControlSet\Control\Class\{4d36e968-e325-11ce-bfc1-08002be10318}"
REGISTRY_VALUES = (
    "DriverDesc",
    "MatchingDeviceId",
    "HardwareInformation.qwMemorySize",
    "HardwareInformation.MemorySize",
    "ProviderName",
)
NO_FREE_NOTE = "VRAM in use is not reported here, so all of it is counted free"
_PCI_IDS = re.compile(r"ven_([0-9a-f]{4}).*?dev_([0-9a-f]{4})(?:.*?rev_([0-9a-f]{2}))?", re.IGNORECASE)
_SIZE = re.compile(r"([\d.]+)\s*([KMGT]?B)", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}

RegistryReader = Callable[[], list[dict[str, Any]]]
CommandRunner = Callable[[list[str]], str]


def read_display_adapters() -> list[dict[str, Any]]:
    """The REGISTRY_VALUES of every display adapter subkey ("0000", "0001"...) that has them."""
    winreg = import_native("winreg")  # Windows only
    adapters: list[dict[str, Any]] = []
    with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, DISPLAY_CLASS_KEY) as cls:
        for i in range(winreg.QueryInfoKey(cls)[0]):
            name = winreg.EnumKey(cls, i)
            if not name.isdigit():
                continue  # "Properties" and friends, which also deny access
            try:
                with winreg.OpenKey(cls, name) as key:
                    values: dict[str, Any] = {}
                    for value_name in REGISTRY_VALUES:
                        try:
                            values[value_name] = winreg.QueryValueEx(key, value_name)[0]
                        except OSError:
                            continue
            except OSError as exc:
                logger.debug("display adapter %s unreadable: %s", name, exc)
                continue
            if values:
                adapters.append(values)
    return adapters


def _registry_bytes(value: Any) -> int | None:
    """qwMemorySize is a QWORD; the older MemorySize a DWORD or 4-8 little-endian bytes."""
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, (bytes, bytearray)) and 0 < len(value) <= 8:
        return int.from_bytes(value, "little") or None
    return None


def probe_windows(reader: RegistryReader | None = None) -> AmdIntelInfo:
    """AMD and Intel display adapters from the registry. Never raises."""
    info = AmdIntelInfo(source="registry")
    try:
        adapters = (reader or read_display_adapters)()
    except Exception as exc:
        logger.warning("display adapters unreadable: %s", exc)
        info.reason = f"the display adapters could not be read from the registry: {exc}"
        return info
    for values in adapters:
        ids = _PCI_IDS.search(str(values.get("MatchingDeviceId") or ""))
        if ids is None:
            continue
        vendor, device, revision = ids.group(1).lower(), ids.group(2).lower(), (ids.group(3) or "").lower()
        if vendor not in (VENDOR_AMD, VENDOR_INTEL):
            continue
        total = _registry_bytes(values.get("HardwareInformation.qwMemorySize")) or _registry_bytes(
            values.get("HardwareInformation.MemorySize")
        )
        gpu = build_gpu(
            len(info.gpus),
            vendor,
            device,
            revision=revision,
            name_hint=str(values.get("DriverDesc") or ""),
            total=total,
            driver=str(values.get("ProviderName") or ""),
            notes=[NO_FREE_NOTE] if total else [],
            prefer_hint=True,
        )
        info.gpus.append(gpu)
    if not info.gpus:
        info.reason = "no AMD or Intel display adapter"
    return info


def run_command(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=15, check=True).stdout


def _size_bytes(text: Any) -> int | None:
    m = _SIZE.search(str(text or ""))
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()]) if m else None


def _mac_vendor(entry: dict[str, Any]) -> str:
    """ "sppci_vendor_amd", "AMD (0x1002)", "sppci_vendor_intel", "Intel" → the PCI vendor id, else ""."""
    text = str(entry.get("spdisplays_vendor") or entry.get("spdisplays_vendor-id") or "").lower()
    if "1002" in text or "amd" in text or text.endswith("_ati"):
        return VENDOR_AMD
    if "8086" in text or "intel" in text:
        return VENDOR_INTEL
    return ""


def probe_macos(runner: CommandRunner | None = None) -> AmdIntelInfo:
    """AMD and Intel GPUs of an Intel Mac; Apple Silicon's GPU is apple.py's. Never raises."""
    info = AmdIntelInfo(source="system_profiler")
    try:
        data = json.loads((runner or run_command)(["system_profiler", "SPDisplaysDataType", "-json"]))
        entries = data.get("SPDisplaysDataType") or []
    except Exception as exc:
        logger.warning("system_profiler failed: %s", exc)
        info.reason = f"system_profiler could not list the GPUs: {exc}"
        return info
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        vendor = _mac_vendor(entry)
        if not vendor:
            continue
        builtin = entry.get("sppci_bus") == "spdisplays_builtin" or "spdisplays_vram_shared" in entry
        total = None if builtin else _size_bytes(entry.get("spdisplays_vram"))
        gpu = build_gpu(
            len(info.gpus),
            vendor,
            hex4(entry.get("spdisplays_device-id")),
            revision=str(entry.get("spdisplays_revision-id") or ""),
            name_hint=str(entry.get("sppci_model") or entry.get("_name") or ""),
            total=total,
            notes=[NO_FREE_NOTE] if total else [],
            prefer_hint=True,
        )
        if builtin and not gpu.integrated:
            gpu.integrated, gpu.bandwidth_gbps = True, None
            gpu.note = INTEGRATED_NOTE
        info.gpus.append(gpu)
    if not info.gpus:
        info.reason = "no AMD or Intel GPU"
    return info
