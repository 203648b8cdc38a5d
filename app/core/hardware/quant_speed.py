"""How fast each weight type decodes on this CPU, as measured by the quant probe (bench/quant_probe.py).

Pure JSON: the speed model reads this before anything is downloaded and must never load llama.cpp to do so.

What is stored (docs/speed-model.md, "CPU per weight type"):
- per weight type T, the rate llama.cpp's decode streams weights of that type at on this CPU, from a generated
  model whose big tensors are all T: rate[T] = bytes_read / (t_token − fixed), t_token the measured time of
  one decoded token and fixed the speed model's per-token and per-layer terms;
- the per-layer term itself (graph ops and thread barriers per layer per token), from two thin models that
  differ only in depth.
The speed model uses both as they are, so its CPU decode figure no longer depends on the read-bandwidth
figure (which wanders 12-26 GB/s between runs on a shared VM) once this CPU is measured.

Keyed per CPU (brand and SIMD flags) and llama.cpp build: a new CPU or a new llama.cpp (new kernels) is
measured again; an entry for another key is ignored.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)

CACHE_FILE_NAME = "cpu_quant_speed.json"
# Bumped when what `speeds` means changes, so figures measured by an older probe are measured again.
PROBE_VERSION = 2
# A per-layer cost above this is a disturbed measurement, not a CPU (0.03-0.1 ms on CPUs measured so far).
MAX_LAYER_S = 5e-3


@dataclass(frozen=True)
class QuantSpeeds:
    rates_gbps: dict[str, float]  # ggml type name ("Q4_K", "F16") -> GB/s decode streams it at here
    layer_s: float | None = None  # per layer per decoded token (None: not measured; the table's)
    bandwidth_gbps: float = 0.0  # plain read bandwidth when measured, for comparison only
    measured_at: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)  # per type: seconds per token, bytes read, layers
    load_per_core: float | None = None  # 1-minute load average per core when measured (None: unknown)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PROBE_VERSION,
            "rates_gbps": self.rates_gbps,
            "layer_s": self.layer_s,
            "bandwidth_gbps": self.bandwidth_gbps,
            "measured_at": self.measured_at,
            "detail": self.detail,
            "load_per_core": self.load_per_core,
        }


def llamacpp_build() -> str:
    """The installed llama.cpp build, without importing it: the wheel's version and its native libraries'
    sizes (a rebuild of the same version with other kernels, e.g. GGML_NATIVE, has other binaries)."""
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return "no llama.cpp"
    try:
        spec = importlib.util.find_spec("llama_cpp")
        roots = list(spec.submodule_search_locations or []) if spec else []
    except (ImportError, ValueError):
        roots = []
    sizes = sorted(
        f"{p.name}:{p.stat().st_size}"
        for root in roots
        for p in Path(root).glob("lib/*")
        if p.is_file() and ("ggml" in p.name or "llama" in p.name)
    )
    return f"{version}|{','.join(sizes)}" if sizes else version


def cpu_key(brand: str, simd: Iterable[str], build: str) -> str:
    return f"{brand.strip() or 'unknown cpu'}|{','.join(sorted(simd))}|{build}"


@lru_cache(maxsize=1)
def _host_brand() -> str:
    from app.core.hardware.cpu import probe_cpu

    return probe_cpu().brand


@lru_cache(maxsize=1)
def _host_build() -> str:
    return llamacpp_build()


def host_key(simd: Iterable[str] | None = None) -> str:
    """This machine's key; `simd` as the Machine was profiled (default: probed now)."""
    if simd is None:
        from app.core.hardware.cpu import probe_cpu

        simd = probe_cpu().simd
    return cpu_key(_host_brand(), simd, _host_build())


def _read_entries(path: Path) -> dict[str, Any]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("quant speed cache %s unreadable, ignoring it: %s", path, exc)
        return {}
    return entries if isinstance(entries, dict) else {}


def _parse(entry: Any) -> QuantSpeeds | None:
    if not isinstance(entry, dict) or entry.get("version") != PROBE_VERSION:
        return None
    raw = entry.get("rates_gbps")
    if not isinstance(raw, dict):
        return None
    rates = {str(t).upper(): float(v) for t, v in raw.items() if _number(v) and 0 < v < 10_000}
    if not rates:
        return None
    layer = entry.get("layer_s")
    layer_s = float(layer) if isinstance(layer, (int, float)) and not isinstance(layer, bool) else None
    bw = entry.get("bandwidth_gbps")
    at = entry.get("measured_at")
    detail = entry.get("detail")
    load = entry.get("load_per_core")
    return QuantSpeeds(
        rates,
        layer_s if layer_s is not None and 0 < layer_s < MAX_LAYER_S else None,
        float(bw) if isinstance(bw, (int, float)) else 0.0,
        float(at) if isinstance(at, (int, float)) else 0.0,
        detail if isinstance(detail, dict) else {},
        float(load) if isinstance(load, (int, float)) else None,
    )


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_quant_speeds(cache_dir: Path, key: str) -> QuantSpeeds | None:
    """The figures measured for `key`, or None (nothing measured, another CPU or build, a broken file)."""
    return _parse(_read_entries(Path(cache_dir) / CACHE_FILE_NAME).get(key))


def read_entry(cache_dir: Path, key: str) -> QuantSpeeds | float | None:
    """The figures for `key`; or, when the last probe failed, the unix time it failed; or None."""
    entry = _read_entries(Path(cache_dir) / CACHE_FILE_NAME).get(key)
    parsed = _parse(entry)
    if parsed is not None:
        return parsed
    if isinstance(entry, dict) and entry.get("version") == PROBE_VERSION and entry.get("failed"):
        at = entry.get("measured_at")
        return float(at) if isinstance(at, (int, float)) else 0.0
    return None


def _write(cache_dir: Path, key: str, entry: dict[str, Any]) -> None:
    path = Path(cache_dir) / CACHE_FILE_NAME
    entries = _read_entries(path)
    entries[key] = entry
    atomic_write_text(path, json.dumps(entries, indent=2, sort_keys=True))


def write_quant_speeds(cache_dir: Path, key: str, result: QuantSpeeds) -> None:
    _write(cache_dir, key, result.to_json())


def write_failure(cache_dir: Path, key: str, reason: str) -> None:
    """Remember a failed probe (a crash, a timeout) so it is not retried at every start."""
    _write(cache_dir, key, {"version": PROBE_VERSION, "failed": reason, "measured_at": time.time()})


_memo: dict[tuple[str, str], tuple[tuple[int, int, int], QuantSpeeds | None]] = {}


def measured_cpu_speeds(simd: Iterable[str], cache_dir: Path | None = None) -> QuantSpeeds | None:
    """The speed model's view: this host's measured figures when a Machine with these SIMD flags is this
    host (brand and build are this process's), else None. Re-read only when the file changes."""
    if cache_dir is None:
        from app.core.paths import app_paths

        try:
            cache_dir = app_paths().cache
        except Exception as exc:  # no home to resolve: predict from the table
            logger.debug("no cache dir for measured quant speeds: %s", exc)
            return None
    path = Path(cache_dir) / CACHE_FILE_NAME
    try:
        st = path.stat()
    except OSError:
        return None
    # The inode too: writes replace the file, and two within one clock tick share a modification time.
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    key = host_key(tuple(simd))
    memo_key = (str(path), key)
    hit = _memo.get(memo_key)
    if hit is None or hit[0] != stamp:
        hit = (stamp, read_quant_speeds(Path(cache_dir), key))
        _memo[memo_key] = hit
    return hit[1]
