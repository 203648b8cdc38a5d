"""AMD and Intel GPUs planned for: Vulkan or ROCm devices from a fake sysfs tree, fit and speed on them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from synthetic import GiB, llama3_8b_spec, profile

from app.core.hardware.drm import probe_drm
from app.core.hardware.profile import AmdIntelInfo, EngineAvailability, GpuInfo
from app.core.models.devices import GPU_MARGIN, machine_from_profile
from app.core.models.memory import estimate_memory
from app.core.models.planner import plan_load
from app.core.models.speed import (
    ETA,
    HOST_COPY_S_PER_ENTRY,
    HOST_SAMPLE_S_PER_ENTRY,
    LOGITS_PCIE_BPS,
    T0_LAYER,
    T0_TOKEN,
    predict_speed,
)

RTX_4090 = ("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)
CPU_NOTE = "the installed llama.cpp is built for the CPU: `make engine BACKEND=vulkan` rebuilds it for the "


def sysfs_card(root: Path, n: int, vendor: str, device: str, revision: str, driver: str, files: dict[str, str]):
    pci = root / "pci" / f"0000:0{n}:00.0"
    pci.mkdir(parents=True)
    for name, text in {"vendor": vendor, "device": device, "revision": revision, **files}.items():
        (pci / name).parent.mkdir(parents=True, exist_ok=True)
        (pci / name).write_text(text + "\n")
    (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    os.symlink(root / "drivers" / driver, pci / "driver")
    (root / "drm" / f"card{n}").mkdir(parents=True)
    os.symlink(pci, root / "drm" / f"card{n}" / "device")


def amd_tree(root: Path, vram: int = 24 * GiB, used: int = 1 * GiB) -> Path:
    files = {"mem_info_vram_total": str(vram), "mem_info_vram_used": str(used)}
    sysfs_card(root, 0, "0x1002", "0x744c", "0xc8", "amdgpu", files)
    return root / "drm"


def with_engine(prof, backend: str | None, offload: bool = True):
    if backend is not None:
        prof.engines = [EngineAvailability("llama.cpp", True, "0.3.16", backend, gpu_offload=offload)]
    return prof


def amd_profile(tmp_path: Path, engine: str | None = "Vulkan", offload: bool = True, **kw):
    prof = with_engine(profile(**kw), engine, offload)
    prof.amd_intel = probe_drm(amd_tree(tmp_path))
    return prof


def test_amd_sysfs_tree_plans_full_offload_to_vulkan_with_table_bandwidth(tmp_path):
    spec = llama3_8b_spec()
    m = machine_from_profile(amd_profile(tmp_path))
    assert m.backend == "vulkan" and m.notes == ()
    [gpu] = m.gpus
    assert (gpu.name, gpu.kind, gpu.model, gpu.label) == ("Vulkan0", "vulkan", "AMD Radeon RX 7900 XTX", "VRAM")
    assert gpu.free_bytes == 23 * GiB and gpu.budget_bytes == 23 * GiB - GPU_MARGIN and gpu.bandwidth_gbps == 960
    plan = plan_load(spec, m, n_ctx=8192)
    assert plan.verdict == "full_gpu" and plan.layers_on_gpu == spec.n_layers + 1
    assert [u.device for u in plan.estimate.devices] == ["CPU", "Vulkan0"]
    assert "Vulkan0:" in plan.explanation

    s = predict_speed(spec, plan)
    assert s.speed_class == "vulkan" and s.bound_by == "GPU"
    gpu_bytes = sum(spec.block_bytes) + spec.output_bytes + spec.other_bytes + 131_072  # one position of KV
    host = spec.n_vocab * (HOST_SAMPLE_S_PER_ENTRY + HOST_COPY_S_PER_ENTRY) + 4 * spec.n_vocab / LOGITS_PCIE_BPS
    fixed = T0_TOKEN + spec.n_layers * T0_LAYER["vulkan"] + host
    expected = 1 / (gpu_bytes / (ETA["vulkan"] * 960e9) + fixed)
    assert s.decode_tok_s == pytest.approx(expected, rel=0.01)


def test_vulkan_decodes_slower_than_cuda_on_the_same_bandwidth(tmp_path):
    spec = llama3_8b_spec()
    amd = predict_speed(spec, plan_load(spec, machine_from_profile(amd_profile(tmp_path)), n_ctx=8192))
    nv_prof = profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 960.0)])
    nv = predict_speed(spec, plan_load(spec, machine_from_profile(nv_prof), n_ctx=8192))
    assert ETA["vulkan"] < ETA["nvidia_consumer"] and amd.decode_tok_s < nv.decode_tok_s


def test_small_amd_card_gets_a_partial_offload(tmp_path):
    spec = llama3_8b_spec(weight_scale=2.0)  # ~8.5 GB of weights
    prof = with_engine(profile(ram_total=64 * GiB), "Vulkan")
    prof.amd_intel = probe_drm(amd_tree(tmp_path, vram=6 * GiB, used=GiB // 2))
    plan = plan_load(spec, machine_from_profile(prof), n_ctx=8192)
    assert plan.verdict == "partial" and 0 < plan.layers_on_gpu < spec.n_layers
    s = predict_speed(spec, plan)
    assert s.speed_class == "vulkan" and s.decode_tok_s > 0


def test_rocm_engine_plans_rocm_devices_with_cuda_memory_figures(tmp_path):
    spec = llama3_8b_spec()
    m = machine_from_profile(amd_profile(tmp_path, engine="ROCm"))
    assert m.backend == "rocm" and [g.name for g in m.gpus] == ["ROCm0"] and m.gpus[0].kind == "rocm"
    plan = plan_load(spec, m, n_ctx=8192)
    cuda = estimate_memory(spec, plan.options, backend="cuda", gpu_names=["ROCm0"], layer_split=[spec.n_layers + 1])
    assert plan.estimate.total == cuda.total
    s = predict_speed(spec, plan)
    assert s.speed_class == "vulkan"  # Vulkan's measured share of bandwidth, not NVIDIA's
    assert T0_LAYER["rocm"] == T0_LAYER["vulkan"]


def test_cpu_only_llama_keeps_the_gpu_plan_and_names_the_fix(tmp_path):
    spec = llama3_8b_spec()
    m = machine_from_profile(amd_profile(tmp_path, engine="CPU", offload=False))
    assert m.backend == "vulkan" and m.notes == (CPU_NOTE + "AMD Radeon RX 7900 XTX",)
    plan = plan_load(spec, m, n_ctx=8192)
    assert plan.verdict == "full_gpu" and plan.explanation.endswith(m.notes[0])


def test_cuda_built_llama_with_only_an_amd_card_names_the_vulkan_rebuild(tmp_path):
    m = machine_from_profile(amd_profile(tmp_path, engine="CUDA"))
    assert m.backend == "vulkan"
    assert m.notes == (
        "the installed llama.cpp is built for CUDA: `make engine BACKEND=vulkan` rebuilds it for the "
        "AMD Radeon RX 7900 XTX",
    )


def test_nvidia_note_names_the_cuda_rebuild():
    prof = with_engine(profile(gpus=[RTX_4090]), "CPU", offload=False)
    m = machine_from_profile(prof)
    assert m.backend == "cuda" and [g.name for g in m.gpus] == ["CUDA0"]
    assert m.notes == (
        "the installed llama.cpp is built for the CPU: `make engine BACKEND=cuda` rebuilds it for the "
        "NVIDIA GeForce RTX 4090",
    )
    assert machine_from_profile(profile(gpus=[RTX_4090])).notes == ()  # no engine installed: nothing to fix


@pytest.mark.parametrize(
    ("engine", "offload", "backend", "names"),
    [
        ("CUDA", True, "cuda", ["CUDA0"]),
        ("Vulkan", True, "vulkan", ["Vulkan0"]),
        ("ROCm", True, "rocm", ["ROCm0"]),
        ("CPU", False, "cuda", ["CUDA0"]),
        (None, False, "cuda", ["CUDA0"]),
    ],
)
def test_nvidia_and_amd_prefers_what_the_engine_drives(tmp_path, engine, offload, backend, names):
    prof = amd_profile(tmp_path, engine=engine, offload=offload, gpus=[RTX_4090])
    m = machine_from_profile(prof)
    assert m.backend == backend and [g.name for g in m.gpus] == names
    want = "NVIDIA GeForce RTX 4090" if backend == "cuda" else "AMD Radeon RX 7900 XTX"
    assert m.gpus[0].model == want


def test_vulkan_engine_on_an_nvidia_only_machine_plans_vulkan():
    m = machine_from_profile(with_engine(profile(gpus=[RTX_4090]), "Vulkan"))
    assert m.backend == "vulkan" and m.gpus[0].name == "Vulkan0" and m.notes == ()


def test_integrated_gpus_get_nothing(tmp_path):
    sysfs_card(tmp_path, 0, "0x8086", "0x4680", "0x0c", "i915", {})
    prof = with_engine(profile(), "Vulkan")
    prof.amd_intel = probe_drm(tmp_path / "drm")
    assert prof.gpus[0].integrated
    m = machine_from_profile(prof)
    assert m.backend == "cpu" and m.gpus == ()
    spec = llama3_8b_spec()
    assert plan_load(spec, m, n_ctx=8192).verdict == "cpu"


def test_intel_arc_beside_its_igpu_is_the_only_vulkan_device(tmp_path):
    sysfs_card(tmp_path, 0, "0x8086", "0x4680", "0x0c", "i915", {})
    sysfs_card(tmp_path, 1, "0x8086", "0xe20b", "0x00", "xe", {"tile0/physical_vram_size_bytes": str(12 * GiB)})
    prof = with_engine(profile(), "Vulkan")
    prof.amd_intel = probe_drm(tmp_path / "drm")
    m = machine_from_profile(prof)
    assert [(g.name, g.model, g.bandwidth_gbps) for g in m.gpus] == [("Vulkan0", "Intel Arc B580", 456)]
    assert m.gpus[0].budget_bytes == 12 * GiB - GPU_MARGIN


def test_prefer_gpu_false_and_unreadable_vram_plan_for_the_cpu():
    prof = with_engine(profile(), "Vulkan")
    prof.amd_intel = AmdIntelInfo(gpus=[GpuInfo(0, "Intel Arc A770", vendor="intel", bandwidth_gbps=560)])
    assert machine_from_profile(prof).backend == "cpu"  # no VRAM figure: nothing to plan onto
    prof.amd_intel.gpus[0].memory_total_bytes = prof.amd_intel.gpus[0].memory_free_bytes = 16 * GiB
    assert machine_from_profile(prof).backend == "vulkan"
    assert machine_from_profile(prof, prefer_gpu=False).backend == "cpu"


def test_sycl_engine_drives_the_intel_arc_but_not_an_amd_card(tmp_path):
    sysfs_card(tmp_path, 0, "0x8086", "0x56a0", "0x08", "xe", {"tile0/physical_vram_size_bytes": str(16 * GiB)})
    prof = with_engine(profile(), "SYCL")
    prof.amd_intel = probe_drm(tmp_path / "drm")
    m = machine_from_profile(prof)
    assert m.backend == "vulkan" and m.gpus[0].model == "Intel Arc A770" and m.notes == ()
    amd = amd_profile(tmp_path / "amd", engine="SYCL")
    assert machine_from_profile(amd).notes[0].startswith("the installed llama.cpp is built for SYCL: ")


def test_an_apu_carve_out_is_planned_only_without_a_discrete_gpu(tmp_path):
    carve = {"mem_info_vram_total": str(64 * GiB), "mem_info_vram_used": str(GiB)}
    sysfs_card(tmp_path, 0, "0x1002", "0x1586", "0xc1", "amdgpu", carve)  # a Strix Halo with 64 GiB set aside
    prof = with_engine(profile(ram_total=32 * GiB, bw=200.0), "Vulkan")  # what the OS has left of 96 GiB
    prof.amd_intel = probe_drm(tmp_path / "drm")
    assert prof.gpus[0].integrated
    m = machine_from_profile(prof)
    [gpu] = m.gpus
    assert (gpu.name, gpu.budget_bytes) == ("Vulkan0", 63 * GiB - GPU_MARGIN)
    assert gpu.bandwidth_gbps == 200.0  # the RAM's: the carve-out is the same memory
    spec = llama3_8b_spec(weight_scale=8.0)  # ~36 GiB: more than the OS's RAM, less than the carve-out
    plan = plan_load(spec, m, n_ctx=8192)
    assert plan.verdict == "full_gpu" and predict_speed(spec, plan).speed_class == "vulkan"
    assert plan_load(spec, machine_from_profile(prof, prefer_gpu=False), n_ctx=8192).verdict == "no_fit"
    # Beside a discrete card (any vendor) the APU gets nothing, as llama.cpp's Vulkan device choice does.
    prof.nvidia.gpus = [GpuInfo(0, "NVIDIA GeForce RTX 4090", memory_total_bytes=24 * GiB, memory_free_bytes=23 * GiB)]
    assert [g.model for g in machine_from_profile(prof).gpus] == ["NVIDIA GeForce RTX 4090"]


def test_a_small_apu_carve_out_is_not_planned(tmp_path):
    sysfs_card(tmp_path, 0, "0x1002", "0x15bf", "0xc1", "amdgpu", {"mem_info_vram_total": str(GiB // 2)})
    prof = with_engine(profile(), "Vulkan")
    prof.amd_intel = probe_drm(tmp_path / "drm")
    assert machine_from_profile(prof).backend == "cpu"
