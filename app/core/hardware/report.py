"""A plain-text report of a HardwareProfile, for `hearth hw` and for bug reports."""

from __future__ import annotations

from app.core.hardware.profile import GpuInfo, HardwareProfile
from app.core.units import fmt_bytes, fmt_gbps


def _table(rows: list[tuple[str, str]]) -> list[str]:
    width = max((len(k) for k, _ in rows), default=0)
    return [f"  {k.ljust(width)}  {v}" for k, v in rows]


def format_profile(p: HardwareProfile) -> str:
    m = p.memory
    rows = [
        ("System", f"{p.os} {p.os_version} ({p.arch})"),
        ("CPU", p.cpu.brand or "unknown"),
        ("Cores", f"{p.cpu.physical_cores or '?'} physical, {p.cpu.logical_cores or '?'} logical"),
        ("SIMD", ", ".join(p.cpu.simd) or p.cpu.note or "unknown"),
        ("RAM", f"{fmt_bytes(m.total_bytes)} total, {fmt_bytes(m.available_bytes)} available"),
        ("Swap", f"{fmt_bytes(m.swap_free_bytes)} free of {fmt_bytes(m.swap_total_bytes)}"),
        ("Bandwidth", bandwidth_text(p)),
    ]
    lines = ["Hardware"] + _table(rows)
    lines.append("GPUs")
    gpu_rows = [(f"[{g.index}] {g.name}", gpu_text(g)) for g in p.gpus]
    if p.nvidia.gpus:
        gpu_rows.append(("Driver", f"{p.nvidia.driver_version or '?'} (CUDA {p.nvidia.cuda_version or '?'})"))
    else:
        gpu_rows.append(("NVIDIA", p.nvidia.reason or "none found"))
    if not p.amd_intel.gpus or p.amd_intel.reason:
        gpu_rows.append(("AMD / Intel", p.amd_intel.reason or "no AMD or Intel GPU"))
    lines += _table(gpu_rows)
    if p.apple is not None:
        a = p.apple
        lines.append("Apple Silicon")
        lines += _table(
            [
                ("Chip", a.chip),
                ("Unified memory", fmt_bytes(a.unified_memory_bytes)),
                ("GPU working set", f"{fmt_bytes(a.gpu_working_set_bytes)} ({a.working_set_source})"),
                ("Bandwidth", fmt_gbps(a.bandwidth_gbps)),
            ]
        )
    lines.append("Engines")
    lines += _table(
        [
            (e.name, f"{e.version or ''} {e.backend or ''}".strip() if e.available else f"unavailable: {e.reason}")
            for e in p.engines
        ]
    )
    for w in p.warnings:
        lines.append(f"Note: {w}")
    lines.append(f"(probed in {p.probe_ms:.0f} ms)")
    return "\n".join(lines)


def gpu_text(g: GpuInfo) -> str:
    """One GPU in a line: its memory, bandwidth and compute capability or driver, then any note."""
    if g.integrated:
        head = "integrated GPU" + (
            f", {fmt_bytes(g.memory_total_bytes)} set aside as VRAM" if g.memory_total_bytes else ""
        )
    else:
        head = (
            f"{fmt_bytes(g.memory_free_bytes)} free of {fmt_bytes(g.memory_total_bytes)}, {fmt_gbps(g.bandwidth_gbps)}"
        )
    if g.vendor == "nvidia":
        head += f", compute {g.compute_capability or '?'}"
    elif g.driver:
        head += f", driver {g.driver}"
    return head + (f" — {g.note}" if g.note else "")


def bandwidth_text(p: HardwareProfile) -> str:
    """The bandwidth in words ("30 GB/s measured, 51 GB/s rated"), or why there is no figure."""
    bw = p.bandwidth
    parts = []
    if bw.cpu_measured_gbps is not None:
        parts.append(f"{fmt_gbps(bw.cpu_measured_gbps)} measured")
    if bw.cpu_table_gbps is not None:
        parts.append(f"{fmt_gbps(bw.cpu_table_gbps)} rated")
    return ", ".join(parts) or bw.note or "not measured"
