"""NVML probing through an injected fake provider, and the real probe on a machine without a driver."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.core.hardware.nvidia import NO_DRIVER_REASON, cuda_version_text, probe_nvidia

GIB = 2**30


class FakeNVMLError(Exception):
    """Shaped like pynvml.NVMLError: carries the NVML return code in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML return code {value}")
        self.value = value


class NVMLError_LibraryNotFound(Exception):  # noqa: N801 - named like pynvml's class
    pass


@dataclass
class FakeGpu:
    name: str | bytes
    total: int
    free: int
    cc: tuple[int, int] = (8, 9)


@dataclass
class FakeNvml:
    """The subset of pynvml that probe_nvidia uses; `fail` maps "function:index" to an exception."""

    gpus: list[FakeGpu]
    fail: dict[str, BaseException] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def _maybe_fail(self, what: str) -> None:
        self.calls.append(what)
        if what in self.fail:
            raise self.fail[what]

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self._maybe_fail("init")

    def nvmlShutdown(self):  # noqa: N802
        self._maybe_fail("shutdown")

    def nvmlSystemGetDriverVersion(self):  # noqa: N802
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self):  # noqa: N802
        return 12040

    def nvmlDeviceGetCount(self):  # noqa: N802
        self._maybe_fail("count")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        self._maybe_fail(f"handle:{i}")
        return i

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return self.gpus[h].name

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        self._maybe_fail(f"memory:{h}")
        g = self.gpus[h]
        return SimpleNamespace(total=g.total, free=g.free, used=g.total - g.free)

    def nvmlDeviceGetCudaComputeCapability(self, h):  # noqa: N802
        return self.gpus[h].cc


def two_gpus(**kw) -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu("NVIDIA GeForce RTX 4090", total=24 * GIB, free=20 * GIB),
            FakeGpu(b"NVIDIA GeForce RTX 3060", total=12 * GIB, free=11 * GIB, cc=(8, 6)),
        ],
        **kw,
    )


def test_two_gpus():
    nvml = two_gpus()
    info = probe_nvidia(nvml)
    assert info.available and info.reason == ""
    assert info.driver_version == "550.54.15"
    assert info.cuda_version == "12.4"
    assert [g.index for g in info.gpus] == [0, 1]
    first, second = info.gpus
    assert first.name == "NVIDIA GeForce RTX 4090"
    assert (first.memory_total_bytes, first.memory_free_bytes) == (24 * GIB, 20 * GIB)
    assert first.memory_used_bytes == 4 * GIB
    assert first.compute_capability == "8.9" and first.bandwidth_gbps == 1008
    assert second.name == "NVIDIA GeForce RTX 3060"  # bytes from old bindings are decoded
    assert second.compute_capability == "8.6" and second.bandwidth_gbps == 360
    assert first.note == second.note == ""
    assert nvml.calls[-1] == "shutdown" and nvml.calls.count("shutdown") == 1


def test_driver_error_mid_probe_marks_that_gpu():
    nvml = two_gpus(fail={"memory:1": FakeNVMLError(15)})  # NVML_ERROR_GPU_IS_LOST
    info = probe_nvidia(nvml)
    assert info.available
    assert len(info.gpus) == 2
    assert info.gpus[0].memory_total_bytes == 24 * GIB and info.gpus[0].note == ""
    lost = info.gpus[1]
    assert lost.name == "NVIDIA GeForce RTX 3060" and lost.memory_total_bytes == 0
    assert "memory" in lost.note and "15" in lost.note
    assert "GPU 1" in info.reason
    assert nvml.calls[-1] == "shutdown"


def test_error_opening_a_device_keeps_the_others():
    info = probe_nvidia(two_gpus(fail={"handle:0": FakeNVMLError(999)}))
    assert info.available and len(info.gpus) == 2
    assert info.gpus[0].note.startswith("cannot open")
    assert info.gpus[1].memory_total_bytes == 12 * GIB
    assert "1 of 2" in info.reason


def test_error_counting_devices_is_a_reason_not_a_raise():
    nvml = two_gpus(fail={"count": FakeNVMLError(17)})
    info = probe_nvidia(nvml)
    assert not info.available and info.gpus == []
    assert info.reason.startswith("NVML error")
    assert nvml.calls[-1] == "shutdown"


@pytest.mark.parametrize("exc", [FakeNVMLError(12), FakeNVMLError(9), NVMLError_LibraryNotFound("libnvidia-ml.so.1")])
def test_no_driver_means_no_gpu(exc):
    nvml = two_gpus(fail={"init": exc})
    info = probe_nvidia(nvml)
    assert not info.available and info.gpus == []
    assert info.reason == NO_DRIVER_REASON
    assert "shutdown" not in nvml.calls  # nothing to shut down after a failed init


def test_real_pynvml_library_not_found_is_recognised():
    pynvml = pytest.importorskip("pynvml")
    info = probe_nvidia(two_gpus(fail={"init": pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)}))
    assert info.reason == NO_DRIVER_REASON


def test_other_init_error_is_reported():
    info = probe_nvidia(two_gpus(fail={"init": FakeNVMLError(4)}))  # no permission
    assert not info.available and info.reason.startswith("NVML error")


def test_failing_shutdown_does_not_raise():
    info = probe_nvidia(two_gpus(fail={"shutdown": FakeNVMLError(1)}))
    assert info.available and len(info.gpus) == 2


def test_unknown_gpu_has_no_bandwidth_and_a_note():
    info = probe_nvidia(FakeNvml([FakeGpu("NVIDIA Quadro Mystery 9000", total=GIB, free=GIB)]))
    assert info.gpus[0].bandwidth_gbps is None
    assert "not in Hearth's table" in info.gpus[0].note
    assert info.reason == ""  # an unknown bandwidth is not an NVML failure


def test_zero_gpus():
    info = probe_nvidia(FakeNvml([]))
    assert not info.available and info.reason


@pytest.mark.parametrize(("raw", "text"), [(12040, "12.4"), (11080, "11.8"), (12060, "12.6"), (13000, "13.0")])
def test_cuda_version_text(raw, text):
    assert cuda_version_text(raw) == text


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None or Path("/dev/nvidia0").exists(), reason="this machine has an NVIDIA driver"
)
def test_real_probe_without_driver():
    info = probe_nvidia()
    assert not info.available and info.gpus == []
    assert info.reason.startswith("none found")
