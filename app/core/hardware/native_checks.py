"""What the native-crash canary learned on this machine, kept per (llama.cpp build, CPU, GPU, driver).

Pure JSON: the canary itself (app.core.engines.canary.guard) runs llama.cpp in a child process and records
here which load configuration passed or crashed; the hardware probe and the planner read it back without
importing llama.cpp. A fingerprint change (a rebuilt engine, a new GPU or driver) starts from nothing, since
what crashed one build may run on the next.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)

STORE_FILE_NAME = "native-checks.json"
# Points every process at one store (the test suite shares one per session, as a user's processes share
# the cache dir); unset, the store lives in Hearth's cache dir.
STORE_ENV = "HEARTH_NATIVE_CHECKS"
FORMAT_VERSION = 1
# The features the canary turns off, riskiest first: llama.cpp's extra CPU buffer types (the AMX and
# repack kernels), flash attention, then GPU offload.
FEATURES = ("extra_bufts", "flash_attn", "gpu_offload")
FEATURE_NAMES = {
    "extra_bufts": "extra CPU buffer types (AMX / repacked weights)",
    "flash_attn": "flash attention",
    "gpu_offload": "GPU offload",
}


@dataclass(frozen=True)
class Fingerprint:
    """What a canary result holds for: change any of it and the checks start again."""

    llama_version: str
    system_info: str  # llama_print_system_info(): the backends and CPU features compiled in
    cpu: str  # brand and SIMD flags
    gpus: str = ""  # names and driver, when the build can offload

    @property
    def key(self) -> str:
        text = "\n".join((self.llama_version, self.system_info, self.cpu, self.gpus))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class NativeConfig:
    """The risky features a load uses; the canary turns them off one at a time."""

    extra_bufts: bool = True
    flash_attn: bool = False
    gpu_offload: bool = False

    @property
    def key(self) -> str:
        return ",".join(f"{f}={'on' if getattr(self, f) else 'off'}" for f in FEATURES)

    def without(self, feature: str) -> NativeConfig:
        return NativeConfig(**{**asdict(self), feature: False})

    def turned_off(self, requested: NativeConfig) -> list[str]:
        """The features `requested` asked for that this configuration does not use."""
        return [f for f in FEATURES if getattr(requested, f) and not getattr(self, f)]


@dataclass
class CheckRecord:
    """One configuration's result for one weight-type set on one fingerprint."""

    weights: str  # the model's tensor types, sorted ("F32,Q4_K,Q6_K")
    config: dict[str, bool]
    passed: bool
    reason: str = ""  # why it failed ("the check process died with SIGSEGV"), or where a crash was seen
    model: str = ""  # the file it was learned on, for the user's eyes
    at: float = field(default_factory=time.time)
    source: str = "canary"  # "canary", or "crash" when a previous run died in native code with it

    @property
    def native_config(self) -> NativeConfig:
        return NativeConfig(**{f: bool(self.config.get(f, False)) for f in FEATURES})


def default_store_path(cache_dir: Path | None = None) -> Path:
    override = os.environ.get(STORE_ENV)
    if override:
        return Path(override)
    if cache_dir is None:
        from app.core.paths import app_paths

        cache_dir = app_paths().cache
    return Path(cache_dir) / STORE_FILE_NAME


class NativeCheckStore:
    """The JSON file of canary results; any thread or process may read and write it (a write re-reads the
    file first, so two processes' records merge instead of the last one winning)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable native-check store %s: %s", self.path, exc)
            return {}
        if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
            return {}
        machines = raw.get("machines")
        return machines if isinstance(machines, dict) else {}

    def records(self, fingerprint: Fingerprint) -> list[CheckRecord]:
        with self._lock:
            entry = self._read().get(fingerprint.key) or {}
        out = []
        for raw in entry.get("checks", []):
            try:
                out.append(CheckRecord(**raw))
            except TypeError:
                logger.debug("skipping a malformed native-check record: %r", raw)
        return out

    def find(self, fingerprint: Fingerprint, weights: str, config: NativeConfig) -> CheckRecord | None:
        for record in self.records(fingerprint):
            if record.weights == weights and record.native_config == config:
                return record
        return None

    def put(self, fingerprint: Fingerprint, record: CheckRecord) -> None:
        """Record `record`, replacing any earlier one for the same weights and configuration."""
        with self._lock:
            machines = self._read()
            entry = machines.setdefault(fingerprint.key, {"fingerprint": asdict(fingerprint), "checks": []})
            kept = [
                r
                for r in entry.get("checks", [])
                if not (r.get("weights") == record.weights and r.get("config") == record.config)
            ]
            entry["checks"] = [*kept, asdict(record)]
            payload = {"version": FORMAT_VERSION, "machines": machines}
            atomic_write_text(self.path, json.dumps(payload, indent=1))
            try:
                os.chmod(self.path, 0o600)
            except OSError:  # Windows, or a file system without modes
                pass

    def forget(self, fingerprint: Fingerprint | None = None) -> int:
        """Drop the records of one fingerprint (or all); returns how many went. `hearth doctor --reset`."""
        with self._lock:
            machines = self._read()
            if fingerprint is None:
                count = sum(len(e.get("checks", [])) for e in machines.values())
                machines = {}
            else:
                count = len((machines.pop(fingerprint.key, None) or {}).get("checks", []))
            atomic_write_text(self.path, json.dumps({"version": FORMAT_VERSION, "machines": machines}, indent=1))
        return count


def turned_off_here(records: list[CheckRecord]) -> set[str]:
    """Features some model runs without on this fingerprint: a failed record whose configuration used the
    feature, followed by a passing one without it for the same weights."""
    off: set[str] = set()
    by_weights: dict[str, list[CheckRecord]] = {}
    for r in records:
        by_weights.setdefault(r.weights, []).append(r)
    for group in by_weights.values():
        passed = [r.native_config for r in group if r.passed]
        for failed in (r.native_config for r in group if not r.passed):
            for ok in passed:
                off.update(ok.turned_off(failed))
    return off


_FINGERPRINTS: dict[tuple[str, str, bool], Fingerprint] = {}
_FINGERPRINT_LOCK = threading.Lock()


def machine_fingerprint(llama_version: str, system_info: str, gpu_offload: bool) -> Fingerprint:
    """This machine's fingerprint for a llama.cpp build (cached per process: the CPU and GPUs do not
    change under a running program, and NVML is slow to start)."""
    key = (llama_version, system_info, gpu_offload)
    with _FINGERPRINT_LOCK:
        found = _FINGERPRINTS.get(key)
        if found is None:
            found = _FINGERPRINTS[key] = Fingerprint(llama_version, system_info, _cpu_text(), _gpu_text(gpu_offload))
        return found


def fingerprint_of(llama_cpp: Any) -> Fingerprint:
    """The fingerprint for an imported llama_cpp module on this machine."""
    info = llama_cpp.llama_print_system_info()
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    version = str(getattr(llama_cpp, "__version__", "") or "")
    return machine_fingerprint(version, text.strip(), bool(llama_cpp.llama_supports_gpu_offload()))


def records_here(llama_cpp: Any) -> list[CheckRecord]:
    """The canary's records for this llama.cpp build on this machine, from the default store."""
    return NativeCheckStore(default_store_path()).records(fingerprint_of(llama_cpp))


def _cpu_text() -> str:
    from app.core.hardware.cpu import probe_cpu

    try:
        cpu = probe_cpu()
    except Exception as exc:  # an unreadable cpuinfo costs precision, not the check
        logger.debug("no CPU facts for the fingerprint: %s", exc)
        return "unknown CPU"
    return f"{cpu.brand} [{' '.join(cpu.simd)}]"


def _gpu_text(gpu_offload: bool) -> str:
    if not gpu_offload:
        return ""
    from app.core.hardware.nvidia import probe_nvidia

    try:
        info = probe_nvidia()
    except Exception as exc:
        logger.debug("no GPU facts for the fingerprint: %s", exc)
        return "unknown GPU"
    names = ", ".join(g.name for g in info.gpus)
    return f"{names} (driver {info.driver_version})" if names else ""
