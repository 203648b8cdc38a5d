"""`hearth doctor`'s verdicts, from fake profiles and build descriptions: each mismatch names its fix."""

from __future__ import annotations

from app.core.hardware.native_checks import CheckRecord
from app.core.hardware.profile import (
    AmdIntelInfo,
    AppleInfo,
    CpuInfo,
    GpuInfo,
    HardwareProfile,
    MemoryInfo,
    NvidiaInfo,
)
from app.core.runtime.doctor import BuildInfo, diagnose, format_report, parse_system_info, speed_gain

GiB = 1024**3
AVX2 = ["sse4_2", "avx", "avx2", "fma", "f16c"]
AVX512 = [*AVX2, "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx"]


def profile(simd=AVX2, nvidia=(), amd=(), apple=None) -> HardwareProfile:
    gpus = [
        GpuInfo(i, name, "nvidia", 24 * GiB, 23 * GiB, GiB, "8.9", bandwidth_gbps=1008) for i, name in enumerate(nvidia)
    ]
    others = [GpuInfo(i, name, "amd", 24 * GiB, 23 * GiB, GiB, bandwidth_gbps=960) for i, name in enumerate(amd)]
    return HardwareProfile(
        os="Linux",
        arch="x86_64",
        cpu=CpuInfo(brand="Test CPU", arch="x86_64", physical_cores=8, logical_cores=16, simd=list(simd)),
        memory=MemoryInfo(total_bytes=64 * GiB, available_bytes=60 * GiB),
        nvidia=NvidiaInfo(available=bool(gpus), gpus=gpus, driver_version="550.1"),
        amd_intel=AmdIntelInfo(gpus=others),
        apple=apple,
    )


def cpu_build(features=("avx", "avx2", "fma", "f16c"), backend="CPU") -> BuildInfo:
    return BuildInfo(version="0.3.36", backend=backend, gpu_offload=backend != "CPU", cpu_features=list(features))


def test_system_info_features_are_read_in_the_probes_names():
    text = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | "
    assert parse_system_info(text + "AVX512_BF16 = 0 | REPACK = 1 |") == [
        "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "amx",
    ]  # fmt: skip
    assert parse_system_info("Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 | ARM_FMA = 1 | DOTPROD = 1 |") == [
        "neon",
        "dotprod",
    ]


def test_a_cpu_build_on_an_nvidia_machine_names_the_cuda_rebuild_and_its_gain():
    p = profile(nvidia=["NVIDIA GeForce RTX 4090"])
    report = diagnose(p, cpu_build(), [], gain=lambda backend: speed_gain(p, backend))
    assert not report.ok
    assert "CPU only" in report.verdict and "RTX 4090" in report.verdict
    assert report.fixes == ["make engine BACKEND=cuda"]
    [gain] = report.gains
    assert "on the CPU" in gain and "with CUDA" in gain
    cpu, gpu = (float(x.split()[0]) for x in gain.split("about ")[1:3])
    assert gpu > 3 * cpu  # a 4090's VRAM bandwidth against dual-channel RAM


def test_an_amd_gpu_wants_vulkan_and_mentions_rocm():
    report = diagnose(profile(amd=["AMD Radeon RX 7900 XTX"]), cpu_build(), [])
    assert report.fixes == ["make engine BACKEND=vulkan"]
    assert any("ROCm" in n for n in report.notes)
    # A ROCm build drives it as well as Vulkan would
    assert diagnose(profile(amd=["AMD Radeon RX 7900 XTX"]), cpu_build(backend="ROCm"), []).ok


def test_an_integrated_gpu_is_not_a_reason_to_rebuild():
    p = profile()
    p.amd_intel.gpus = [GpuInfo(0, "Intel UHD Graphics 770", "intel", integrated=True)]
    assert diagnose(p, cpu_build(), []).ok


def test_a_mac_without_metal_is_told_so():
    apple = AppleInfo(chip="Apple M2 Max", unified_memory_bytes=64 * GiB)
    report = diagnose(profile(simd=["neon", "dotprod"], apple=apple), cpu_build(("neon", "dotprod")), [])
    assert report.fixes == ["make engine BACKEND=metal"]
    ok = diagnose(profile(simd=["neon", "dotprod"], apple=apple), cpu_build(("neon", "dotprod"), "Metal"), [])
    assert ok.ok and "runs on Metal" in ok.verdict


def test_a_matching_cpu_build_is_fine():
    report = diagnose(profile(), cpu_build(), [])
    assert report.ok and report.fixes == [] and "runs on the CPU" in report.verdict


def test_a_build_using_instructions_this_cpu_lacks_is_flagged():
    report = diagnose(profile(simd=AVX2), cpu_build((*AVX2[1:], "avx512f")), [])
    assert not report.ok and "avx512f" in report.verdict and "illegal instruction" in report.verdict
    assert report.fixes == ["make engine BACKEND=cpu"]


def test_flags_a_cpu_implies_are_not_missing():
    """A profile listing only AVX2 (and FMA) is not a CPU without AVX or F16C: no false illegal-instruction."""
    report = diagnose(profile(simd=["avx2", "fma"]), cpu_build(), [])
    assert report.ok and report.fixes == []


def test_a_portable_build_on_an_avx512_cpu_suggests_a_native_one():
    report = diagnose(profile(simd=AVX512), cpu_build(), [])
    assert report.ok  # it runs; it could run faster
    assert any("avx512f" in n and "built without" in n for n in report.notes)
    assert report.fixes == ["make engine BACKEND=cpu"]


def test_the_canary_findings_are_reported():
    records = [
        CheckRecord("F32,Q4_1", {"extra_bufts": True, "flash_attn": False, "gpu_offload": False}, False,
                    "the check process died with SIGSEGV", "SmolLM2.gguf"),
        CheckRecord("F32,Q4_1", {"extra_bufts": False, "flash_attn": False, "gpu_offload": False}, True, "",
                    "SmolLM2.gguf"),
    ]  # fmt: skip
    report = diagnose(profile(simd=AVX512), cpu_build((*AVX2[1:], "avx512f", "amx")), records)
    assert report.turned_off == ["extra_bufts"]
    assert "without extra CPU buffer types" in report.verdict
    assert any("SIGSEGV" in n for n in report.notes)
    text = format_report(report)
    assert "SmolLM2.gguf [F32,Q4_1] with extra_bufts: failed: the check process died with SIGSEGV" in text
    assert report.to_dict()["checks"][1]["passed"] is True


def test_no_engine_says_how_to_install_one():
    report = diagnose(profile(), None, [], build_error="libllama.so: cannot open shared object file")
    assert not report.ok and "cannot open shared object" in report.verdict and report.fixes == ["make install"]
