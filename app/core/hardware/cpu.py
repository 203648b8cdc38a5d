"""CPU facts: brand, arch, cores, SIMD flags. Parsers take text so tests can feed recorded outputs."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys
from pathlib import Path

from app.core.hardware.profile import CpuInfo

logger = logging.getLogger(__name__)

# The flags llama.cpp kernels care about, in this order in CpuInfo.simd.
SIMD_NAMES = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx_vnni", "amx", "neon", "sve", "dotprod", "i8mm",
)  # fmt: skip

# aarch64 /proc/cpuinfo "Features" → our names.
_ARM_FEATURES = {"asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "sve": "sve"}
# ARM "CPU implementer"/"CPU part" pairs for machines whose cpuinfo has no model name.
_ARM_PARTS = {
    ("0x41", "0xd03"): "ARM Cortex-A53",
    ("0x41", "0xd08"): "ARM Cortex-A72",
    ("0x41", "0xd0b"): "ARM Cortex-A76",
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
}
# macOS hw.optional.* keys (Intel and Apple Silicon) → our names.
_SYSCTL_FLAGS = {
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512_vnni",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
}
# Intel Mac machdep.cpu.features / leaf7_features words → our names.
_INTEL_MAC_WORDS = {
    "SSE4.2": "sse4_2", "AVX1.0": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c",
    "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512VL": "avx512vl",
}  # fmt: skip
SYSCTL_KEYS = (
    "machdep.cpu.brand_string", "machdep.cpu.features", "machdep.cpu.leaf7_features",
    "hw.memsize", "hw.physicalcpu", "hw.logicalcpu", "hw.optional", "iogpu.wired_limit_mb",
)  # fmt: skip


def _ordered(found: set[str]) -> list[str]:
    return [name for name in SIMD_NAMES if name in found]


def normalise_flags(raw: list[str] | set[str]) -> list[str]:
    """Map raw x86 flags or aarch64 Features to SIMD_NAMES (any amx_* → "amx"; asimd → "neon")."""
    found: set[str] = set()
    for flag in (f.strip().lower() for f in raw):
        if flag in SIMD_NAMES:
            found.add(flag)
        elif flag.startswith("amx"):
            found.add("amx")
        elif flag in _ARM_FEATURES:
            found.add(_ARM_FEATURES[flag])
        elif flag.startswith("sve"):  # sve2, svei8mm…: SVE is there if any of them is
            found.add("sve")
    return _ordered(found)


def parse_proc_cpuinfo(text: str) -> tuple[str, list[str]]:
    """(brand, simd) from Linux /proc/cpuinfo text, x86 ("flags") or aarch64 ("Features")."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key and key not in fields:  # the first processor block is representative
            fields[key] = value.strip()
    brand = fields.get("model name", "")
    if not brand and "cpu implementer" in fields:  # aarch64 kernels print no model name
        impl, part = fields["cpu implementer"].lower(), fields.get("cpu part", "").lower()
        brand = _ARM_PARTS.get((impl, part)) or fields.get("model") or fields.get("hardware") or ""
        brand = brand or f"ARM CPU (implementer {impl}, part {part})"
    raw = (fields.get("flags") or fields.get("features") or "").split()
    return brand, normalise_flags(raw)


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl name ...` output ("key: value" lines) → dict; later lines win."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    return values


def read_sysctl(keys: tuple[str, ...] = SYSCTL_KEYS, timeout_s: float = 1.0) -> dict[str, str]:
    """Run `sysctl` once for `keys` (macOS); unknown keys are skipped by sysctl, errors give {}."""
    try:
        out = subprocess.run(["sysctl", *keys], capture_output=True, text=True, timeout=timeout_s, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("sysctl failed: %s", exc)
        return {}
    return parse_sysctl(out)


def parse_sysctl_cpu(values: dict[str, str]) -> tuple[str, list[str]]:
    """(brand, simd) from macOS sysctl values; arm64 always has NEON."""
    found: set[str] = set()
    for key, name in _SYSCTL_FLAGS.items():
        if values.get(key, "0").strip() == "1":
            found.add(name)
    # Intel Macs also list flags in machdep.cpu.features ("SSE4.2 AVX1.0 FMA F16C") and leaf7.
    words = (values.get("machdep.cpu.features", "") + " " + values.get("machdep.cpu.leaf7_features", "")).upper()
    for word in words.split():
        if word in _INTEL_MAC_WORDS:
            found.add(_INTEL_MAC_WORDS[word])
    if values.get("hw.optional.arm64", "0").strip() == "1" or "hw.optional.arm.FEAT_DotProd" in values:
        found.add("neon")
    return values.get("machdep.cpu.brand_string", ""), _ordered(found)


def probe_cpu(*, cpuinfo_text: str | None = None, sysctl: dict[str, str] | None = None) -> CpuInfo:
    """This machine's CPU. On macOS pass `sysctl` values already read (probe.py reads them once)."""
    info = CpuInfo(arch=platform.machine())
    try:
        import psutil

        info.physical_cores = psutil.cpu_count(logical=False)
        info.logical_cores = psutil.cpu_count(logical=True)
    except ImportError:
        info.note = "psutil is not installed: core counts unknown"
    if sys.platform == "darwin" or sysctl is not None:
        values = read_sysctl() if sysctl is None else sysctl
        info.brand, info.simd = parse_sysctl_cpu(values)
        if values.get("hw.optional.arm64") == "1":
            info.arch = "arm64"  # even when this Python runs under Rosetta
    else:
        if cpuinfo_text is None:
            try:
                cpuinfo_text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                info.note = f"cannot read /proc/cpuinfo: {exc}"
                cpuinfo_text = ""
        info.brand, info.simd = parse_proc_cpuinfo(cpuinfo_text)
    if not info.brand:
        info.brand = platform.processor() or "unknown CPU"
    if not info.simd and not info.note:
        info.note = "SIMD flags unknown on this platform"
    return info
