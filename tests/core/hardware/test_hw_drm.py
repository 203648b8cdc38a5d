"""AMD and Intel GPUs without vendor SDKs: fake /sys/class/drm trees, registry values and system_profiler JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.core.hardware import probe_hardware
from app.core.hardware.adapters import probe_macos, probe_windows
from app.core.hardware.drm import probe_drm
from app.core.hardware.pci_ids import CARVE_OUT_NOTE, INTEGRATED_NOTE, hex4, lookup_pci
from app.core.hardware.profile import AmdIntelInfo, GpuInfo, HardwareProfile, NvidiaInfo
from app.core.hardware.report import format_profile

GIB = 2**30


def add_card(
    root: Path,
    n: int,
    vendor: str,
    device: str,
    *,
    revision: str = "0x00",
    driver: str = "",
    files: dict[str, str] | None = None,
    card_files: dict[str, str] | None = None,
) -> Path:
    """cardN/device/ as the kernel lays it out: a PCI device directory with a `driver` symlink."""
    pci = root / "devices" / f"0000:0{n}:00.0"
    pci.mkdir(parents=True)
    (pci / "vendor").write_text(vendor + "\n")
    (pci / "device").write_text(device + "\n")
    (pci / "revision").write_text(revision + "\n")
    for rel, text in (files or {}).items():
        (pci / rel).parent.mkdir(parents=True, exist_ok=True)
        (pci / rel).write_text(text)
    if driver:
        drv = root / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(drv, pci / "driver")
    drm = root / "class" / "drm"
    card = drm / f"card{n}"
    card.mkdir(parents=True)
    os.symlink(pci, card / "device")
    for name, text in (card_files or {}).items():
        (card / name).write_text(text)
    (drm / f"card{n}-DP-1").mkdir()  # a connector: must not be read as a card
    return card


def drm(root: Path) -> Path:
    return root / "class" / "drm"


def amd_7900xtx(root: Path, n: int = 0, used: int = 2 * GIB) -> Path:
    return add_card(
        root,
        n,
        "0x1002",
        "0x744c",
        revision="0xc8",
        driver="amdgpu",
        files={"mem_info_vram_total": f"{24 * GIB}\n", "mem_info_vram_used": f"{used}\n"},
    )


def test_amd_discrete_card_with_vram(tmp_path):
    amd_7900xtx(tmp_path)
    info = probe_drm(drm(tmp_path))
    assert info.source == "sysfs" and info.reason == ""
    [gpu] = info.gpus
    assert gpu.name == "AMD Radeon RX 7900 XTX" and gpu.vendor == "amd" and gpu.driver == "amdgpu"
    assert gpu.pci_id == "1002:744c" and not gpu.integrated
    assert (gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes) == (24 * GIB, 2 * GIB, 22 * GIB)
    assert gpu.bandwidth_gbps == 960 and gpu.note == ""


def test_revision_picks_the_card_and_unknown_revision_is_not_guessed(tmp_path):
    add_card(tmp_path, 0, "0x1002", "0x744c", revision="0xcc", driver="amdgpu", files={"mem_info_vram_total": "1"})
    add_card(tmp_path, 1, "0x1002", "0x744c", revision="0xd0", driver="amdgpu")
    xt, other = probe_drm(drm(tmp_path)).gpus
    assert xt.name == "AMD Radeon RX 7900 XT"
    # An unlisted revision gets the chip's name, which matches no bandwidth rather than a sibling card's.
    assert other.name == "AMD Radeon Navi 31 GPU" and other.bandwidth_gbps is None
    assert "not in Hearth's table" in other.note


def test_unknown_amd_card_falls_back_to_product_name_then_pci_id(tmp_path):
    add_card(
        tmp_path,
        0,
        "0x1002",
        "0x7fff",
        driver="amdgpu",
        files={"mem_info_vram_total": str(16 * GIB), "mem_info_vram_used": "0", "product_name": "Radeon Test 1\n"},
    )
    add_card(tmp_path, 1, "0x1002", "0x7ffe", driver="amdgpu", files={"mem_info_vram_total": str(8 * GIB)})
    named, bare = probe_drm(drm(tmp_path)).gpus
    assert named.name == "Radeon Test 1" and not named.integrated
    assert bare.name == "AMD GPU 0x7ffe" and bare.index == 1
    assert "VRAM in use is not reported" in bare.note and bare.memory_free_bytes == 8 * GIB


def test_intel_igpu_is_integrated_with_no_vram_and_no_bandwidth(tmp_path):
    add_card(tmp_path, 0, "0x8086", "0x4680", driver="i915")
    [gpu] = probe_drm(drm(tmp_path)).gpus
    assert gpu.vendor == "intel" and gpu.integrated and gpu.driver == "i915"
    assert gpu.memory_total_bytes == 0 and gpu.bandwidth_gbps is None
    assert gpu.name == "Intel integrated GPU 0x4680" and gpu.note.startswith(INTEGRATED_NOTE)


def test_amd_apu_is_integrated_even_with_a_carve_out(tmp_path):
    add_card(tmp_path, 0, "0x1002", "0x15bf", driver="amdgpu", files={"mem_info_vram_total": str(4 * GIB)})
    [gpu] = probe_drm(drm(tmp_path)).gpus
    assert gpu.integrated and gpu.memory_total_bytes == 4 * GIB and gpu.bandwidth_gbps is None
    assert gpu.name == "AMD integrated GPU 0x15bf" and gpu.note.startswith(CARVE_OUT_NOTE)
    add_card(tmp_path, 1, "0x1002", "0x15bf", driver="amdgpu", files={"mem_info_vram_total": str(GIB // 2)})
    assert probe_drm(drm(tmp_path)).gpus[1].note.startswith(INTEGRATED_NOTE)  # the default 512 MiB


@pytest.mark.parametrize(
    ("files", "card_files"),
    [
        ({"tile0/physical_vram_size_bytes": str(12 * GIB)}, {}),  # xe
        ({"lmem_total_bytes": str(12 * GIB)}, {}),
        ({}, {"lmem_total_bytes": str(12 * GIB)}),  # i915 on the card directory
        ({"mem_info_vram_total": str(12 * GIB), "mem_info_vram_used": str(GIB)}, {}),
    ],
)
def test_intel_arc_vram_from_any_driver_file(tmp_path, files, card_files):
    add_card(tmp_path, 0, "0x8086", "0xe20b", driver="xe", files=files, card_files=card_files)
    [gpu] = probe_drm(drm(tmp_path)).gpus
    assert gpu.name == "Intel Arc B580" and not gpu.integrated and gpu.driver == "xe"
    assert gpu.memory_total_bytes == 12 * GIB and gpu.bandwidth_gbps == 456


def test_intel_arc_multi_tile_vram_is_summed(tmp_path):
    tiles = {f"tile{i}/physical_vram_size_bytes": str(8 * GIB) for i in range(2)}
    add_card(tmp_path, 0, "0x8086", "0x56a0", driver="xe", files=tiles)
    [gpu] = probe_drm(drm(tmp_path)).gpus
    assert gpu.name == "Intel Arc A770" and gpu.memory_total_bytes == 16 * GIB and gpu.bandwidth_gbps == 560


def test_intel_arc_without_a_vram_file_is_listed_but_says_why(tmp_path):
    add_card(tmp_path, 0, "0x8086", "0x56a0", driver="i915")
    [gpu] = probe_drm(drm(tmp_path)).gpus
    assert gpu.name == "Intel Arc A770" and not gpu.integrated and gpu.memory_total_bytes == 0
    assert "VRAM could not be read" in gpu.note


def test_nvidia_and_virtual_cards_are_skipped(tmp_path):
    add_card(tmp_path, 0, "0x10de", "0x2684", driver="nvidia", files={"mem_info_vram_total": str(24 * GIB)})
    add_card(tmp_path, 1, "0x1234", "0x1111", driver="bochs-drm")
    amd_7900xtx(tmp_path, 2)
    info = probe_drm(drm(tmp_path))
    assert [g.name for g in info.gpus] == ["AMD Radeon RX 7900 XTX"] and info.gpus[0].index == 0


def test_malformed_and_unreadable_files_do_not_crash(tmp_path):
    add_card(
        tmp_path,
        0,
        "0x1002",
        "0x744c",
        revision="garbage",
        driver="amdgpu",
        files={"mem_info_vram_total": "lots\n", "mem_info_vram_used": "-5\n"},
    )
    broken = add_card(tmp_path, 1, "0x1002", "0x73bf", revision="0xc1", driver="amdgpu")
    (broken / "device" / "vendor").unlink()
    (broken / "device" / "vendor").mkdir()  # reading a directory raises IsADirectoryError
    (broken / "device" / "uevent").write_text("DRIVER=amdgpu\nPCI_ID=1002:73BF\n")
    (drm(tmp_path) / "card2").mkdir()  # no device link at all
    gpus = probe_drm(drm(tmp_path)).gpus
    assert len(gpus) == 2
    assert gpus[0].memory_total_bytes == 0 and gpus[0].name == "AMD Radeon Navi 31 GPU"
    assert gpus[1].name == "AMD Radeon RX 6800 XT" and gpus[1].driver == "amdgpu"


def test_missing_root_gives_a_reason(tmp_path):
    info = probe_drm(tmp_path / "nope")
    assert info.gpus == [] and "cannot list" in info.reason
    assert probe_drm(tmp_path).reason == "no AMD or Intel GPU"


def test_one_pci_device_behind_two_cards_counts_once(tmp_path):
    card = amd_7900xtx(tmp_path)
    (drm(tmp_path) / "card1").mkdir()
    os.symlink(os.readlink(card / "device"), drm(tmp_path) / "card1" / "device")
    assert len(probe_drm(drm(tmp_path)).gpus) == 1


def test_pci_helpers():
    assert hex4("0x744C") == "744c" and hex4("744c") == "744c" and hex4(0x1002) == "1002"
    assert hex4("zz") == "" and hex4(None) == "" and hex4("0x123456") == ""
    assert lookup_pci("1002", "744c", "0xce").name == "AMD Radeon RX 7900 GRE"
    assert lookup_pci("1002", "740f").name == "AMD Instinct MI210"
    assert lookup_pci("8086", "9a49").discrete is False  # a Tiger Lake iGPU: not in the discrete list


# -- Windows ---------------------------------------------------------------------------------------------


def test_windows_registry_adapters():
    adapters = [
        {
            "DriverDesc": "AMD Radeon RX 7900 XTX",
            "MatchingDeviceId": r"PCI\VEN_1002&DEV_744C&REV_C8",
            "HardwareInformation.qwMemorySize": 24 * GIB,
            "ProviderName": "Advanced Micro Devices, Inc.",
        },
        {
            "DriverDesc": "Intel(R) UHD Graphics 770",
            "MatchingDeviceId": r"pci\ven_8086&dev_4680",
            "HardwareInformation.MemorySize": (128 * 2**20).to_bytes(4, "little"),
        },
        {"DriverDesc": "NVIDIA GeForce RTX 4090", "MatchingDeviceId": r"PCI\VEN_10DE&DEV_2684"},
        {"DriverDesc": "Microsoft Basic Display Adapter", "MatchingDeviceId": "ROOT\\BasicDisplay"},
    ]
    info = probe_windows(lambda: adapters)
    assert info.source == "registry" and [g.name for g in info.gpus] == [
        "AMD Radeon RX 7900 XTX",
        "Intel(R) UHD Graphics 770",
    ]
    amd, igpu = info.gpus
    assert amd.memory_total_bytes == amd.memory_free_bytes == 24 * GIB and amd.bandwidth_gbps == 960
    assert not amd.integrated and "not reported" in amd.note
    assert igpu.integrated and igpu.memory_total_bytes == 128 * 2**20


def test_windows_registry_failure_is_a_reason_not_a_crash():
    def boom():
        raise PermissionError("access denied")

    info = probe_windows(boom)
    assert info.gpus == [] and "access denied" in info.reason
    assert probe_windows(lambda: []).reason == "no AMD or Intel display adapter"


# -- macOS (Intel Macs) ----------------------------------------------------------------------------------

MAC_JSON = {
    "SPDisplaysDataType": [
        {
            "_name": "Intel UHD Graphics 630",
            "sppci_bus": "spdisplays_builtin",
            "sppci_model": "Intel UHD Graphics 630",
            "spdisplays_vendor": "sppci_vendor_intel",
            "spdisplays_device-id": "0x3e9b",
            "spdisplays_vram_shared": "1536 MB",
        },
        {
            "_name": "AMD Radeon Pro 5500M",
            "sppci_bus": "spdisplays_pcie_device",
            "sppci_model": "AMD Radeon Pro 5500M",
            "spdisplays_vendor": "sppci_vendor_amd",
            "spdisplays_device-id": "0x7340",
            "spdisplays_vram": "8 GB",
        },
    ]
}


def test_macos_system_profiler():
    calls = []

    def runner(argv):
        calls.append(argv)
        return json.dumps(MAC_JSON)

    info = probe_macos(runner)
    assert calls == [["system_profiler", "SPDisplaysDataType", "-json"]]
    igpu, amd = info.gpus
    assert igpu.integrated and igpu.vendor == "intel" and igpu.memory_total_bytes == 0
    assert amd.name == "AMD Radeon Pro 5500M" and not amd.integrated and amd.memory_total_bytes == 8 * GIB
    assert amd.pci_id == "1002:7340" and amd.bandwidth_gbps is None  # not in the table: said in the note
    assert "not in Hearth's table" in amd.note


def test_macos_apple_silicon_and_bad_output():
    apple = {"SPDisplaysDataType": [{"sppci_model": "Apple M2 Max", "spdisplays_vendor": "sppci_vendor_Apple"}]}
    assert probe_macos(lambda _argv: json.dumps(apple)).gpus == []
    assert "system_profiler" in probe_macos(lambda _argv: "not json").reason


# -- the profile ---------------------------------------------------------------------------------------


def _mixed_profile() -> HardwareProfile:
    nv = GpuInfo(0, "NVIDIA GeForce RTX 4090", memory_total_bytes=24 * GIB, memory_free_bytes=23 * GIB)
    amd = GpuInfo(0, "AMD Radeon RX 7900 XTX", vendor="amd", memory_total_bytes=24 * GIB, driver="amdgpu")
    igpu = GpuInfo(1, "Intel GPU 0x4680", vendor="intel", integrated=True, driver="i915", note=INTEGRATED_NOTE)
    return HardwareProfile(
        nvidia=NvidiaInfo(available=True, driver_version="550.1", gpus=[nv]),
        amd_intel=AmdIntelInfo(source="sysfs", gpus=[amd, igpu]),
    )


def test_profile_gpus_and_json_round_trip():
    p = _mixed_profile()
    assert [g.vendor for g in p.gpus] == ["nvidia", "amd", "intel"]
    back = HardwareProfile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p and back.amd_intel.gpus[1].integrated


def test_old_profile_json_still_loads():
    old = {"os": "Linux", "nvidia": {"available": True, "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 3090"}]}}
    p = HardwareProfile.from_dict(old)
    assert p.amd_intel == AmdIntelInfo() and [g.name for g in p.gpus] == ["NVIDIA GeForce RTX 3090"]
    assert p.gpus[0].integrated is False and p.gpus[0].driver == ""


def test_report_lists_amd_and_intel():
    text = format_profile(_mixed_profile())
    assert "AMD Radeon RX 7900 XTX" in text and "driver amdgpu" in text
    intel = next(line for line in text.splitlines() if "Intel GPU 0x4680" in line)
    assert "integrated GPU" in intel and "driver i915" in intel
    assert "compute ?" in text  # NVIDIA keeps its columns
    bare = format_profile(HardwareProfile(amd_intel=AmdIntelInfo(reason="no AMD or Intel GPU")))
    assert "AMD / Intel" in bare and "no AMD or Intel GPU" in bare


def test_probe_hardware_takes_the_amd_intel_probe(tmp_path):
    amd_7900xtx(tmp_path)
    p = probe_hardware(
        cache_dir=tmp_path / "cache",
        measure_bandwidth=False,
        amd_intel_probe=lambda: probe_drm(drm(tmp_path)),
        timeout_s=30.0,
    )
    assert [g.name for g in p.amd_intel.gpus] == ["AMD Radeon RX 7900 XTX"]
    assert "AMD Radeon RX 7900 XTX" in [g.name for g in p.gpus]


def test_probe_hardware_survives_a_failing_amd_intel_probe(tmp_path):
    def boom() -> AmdIntelInfo:
        raise RuntimeError("sysfs exploded")

    p = probe_hardware(cache_dir=tmp_path, measure_bandwidth=False, amd_intel_probe=boom, timeout_s=30.0)
    assert p.amd_intel.gpus == [] and p.amd_intel.reason
    assert any("sysfs exploded" in w for w in p.warnings)
