"""Memory bandwidth: the GPU / Apple chip table, the DDR rule, and a measured CPU read test."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.core.atomic import atomic_write_text
from app.core.native import import_native

logger = logging.getLogger(__name__)

TABLE_PATH = Path(__file__).resolve().parents[3] / "resources" / "hardware.json"
CACHE_FILE_NAME = "cpu_bandwidth.json"
GB = 1e9
# Words that mark a different memory configuration than the desktop / SXM part of the same name.
_VARIANT_WORDS = ("laptop", "mobile", "max q")


@dataclass(frozen=True)
class BandwidthLookup:
    gbps: float | None
    matched: str | None = None  # the table key that matched
    note: str = ""


def _tokens(name: str) -> tuple[str, ...]:
    return tuple(re.sub(r"[^0-9a-z]+", " ", name.lower()).split())


def _contains(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


@lru_cache(maxsize=4)
def load_table(path: Path = TABLE_PATH) -> dict[str, Any]:
    """The parsed resources/hardware.json; an empty table (logged) when it is missing or broken."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("hardware table %s unreadable: %s", path, exc)
        return {}


def _lookup(name: str, table: dict[str, float], kind: str) -> BandwidthLookup:
    if not name:
        return BandwidthLookup(None, note=f"no {kind} name to look up")
    toks = _tokens(name)
    # Longest key (in words, then characters) wins, so "RTX 4060 Ti" is not read as "RTX 4060".
    hits = [k for k in table if _contains(toks, _tokens(k))]
    if not hits:
        return BandwidthLookup(None, note=f"memory bandwidth of {name!r} is not in Hearth's table")
    best = max(hits, key=lambda k: (len(_tokens(k)), len(k)))
    joined = " ".join(toks)
    for word in _VARIANT_WORDS:
        if f" {word} " in f" {joined} " and word not in " ".join(_tokens(best)):
            return BandwidthLookup(
                None, note=f"{name!r} is a {word} variant of {best}; its bandwidth is not in Hearth's table"
            )
    return BandwidthLookup(float(table[best]), matched=best)


def lookup_in_table(name: str, section: str, path: Path = TABLE_PATH) -> BandwidthLookup:
    """Any name-keyed number in resources/hardware.json ("gpu_fp16_tflops", "apple_gpu_cores", ...),
    matched the way bandwidths are: whole words, longest key, laptop variants refused."""
    return _lookup(name, load_table(path).get(section, {}), section)


def lookup_gpu_bandwidth(name: str, path: Path = TABLE_PATH) -> BandwidthLookup:
    """Peak GB/s of a discrete GPU from its NVML name ("NVIDIA GeForce RTX 4090", "NVIDIA H100 PCIe")."""
    return _lookup(name, load_table(path).get("gpus", {}), "GPU")


def lookup_apple_bandwidth(chip: str, path: Path = TABLE_PATH) -> BandwidthLookup:
    """Peak GB/s of an Apple chip ("Apple M3 Max"); binned variants are noted, the full chip is used."""
    table = load_table(path)
    res = _lookup(chip, table.get("apple_chips", {}), "chip")
    if res.matched:
        note = table.get("apple_notes", {}).get(res.matched, "")
        return BandwidthLookup(res.gbps, res.matched, note)
    return res


def lookup_bandwidth(name: str, path: Path = TABLE_PATH) -> BandwidthLookup:
    """Either table: Apple chip names go to the chip table, everything else to the GPU table."""
    if "apple" in _tokens(name) or re.match(r"^\s*M\d", name):
        return lookup_apple_bandwidth(name, path)
    return lookup_gpu_bandwidth(name, path)


def ddr_bandwidth_gbps(channels: int, mt_per_s: float) -> float:
    """Theoretical RAM bandwidth: channels x 8 bytes x MT/s (DDR5-6000 dual channel -> 96.0)."""
    if channels <= 0 or mt_per_s <= 0:
        raise ValueError("channels and MT/s must be positive")
    return channels * 8 * mt_per_s * 1e6 / GB


def measure_read_bandwidth(
    *, budget_s: float = 0.2, size_bytes: int = 256 * 1024 * 1024, threads: int | None = None
) -> float:
    """Best-of-N GB/s for summing a `size_bytes` array, split over `threads`, within `budget_s`.

    The first pass is a warm-up (TLB, prefetchers) and only later passes count; at least one
    is always timed. Allocating and filling the array is part of the budget.
    """
    np = import_native("numpy")  # heavy; only this test needs it

    start = time.perf_counter()
    n_threads = max(1, threads or 1)
    arr = np.ones(size_bytes // 8, dtype=np.float64)
    chunks = np.array_split(arr, n_threads)

    def one_pass() -> float:
        if n_threads == 1:
            t0 = time.perf_counter()
            arr.sum()
            return time.perf_counter() - t0
        barrier = threading.Barrier(n_threads + 1)
        workers = [threading.Thread(target=_sum_after, args=(barrier, c), daemon=True) for c in chunks]
        for w in workers:
            w.start()
        barrier.wait()  # numpy releases the GIL in reductions, so the slices are read in parallel
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        return time.perf_counter() - t0

    durations: list[float] = []
    while True:
        durations.append(one_pass())
        elapsed = time.perf_counter() - start
        # At least one timed pass after the warm-up; then stop before overrunning the budget.
        if len(durations) >= 8 or (len(durations) >= 2 and elapsed + durations[-1] > budget_s):
            break
    best = min(durations[1:])
    return arr.nbytes / best / GB


def _sum_after(barrier: threading.Barrier, chunk: Any) -> None:
    barrier.wait()
    chunk.sum()


def cache_key(cpu_brand: str, total_ram_bytes: int) -> str:
    return f"{cpu_brand.strip() or 'unknown cpu'}|{int(total_ram_bytes)}"


def _read_cache(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("bandwidth cache %s unreadable, measuring again: %s", path, exc)
        return {}
    return entries if isinstance(entries, dict) else {}


def cached_cpu_bandwidth(cache_dir: Path, cpu_brand: str, total_ram_bytes: int) -> tuple[float, float] | None:
    """(GB/s, unix time measured) cached for this CPU + RAM, or None."""
    hit = _read_cache(Path(cache_dir) / CACHE_FILE_NAME).get(cache_key(cpu_brand, total_ram_bytes))
    if isinstance(hit, dict) and isinstance(hit.get("gbps"), (int, float)) and hit["gbps"] > 0:
        return float(hit["gbps"]), float(hit.get("measured_at") or 0.0)
    return None


def cpu_read_bandwidth(
    cache_dir: Path | None,
    cpu_brand: str,
    total_ram_bytes: int,
    *,
    refresh: bool = False,
    measure: Callable[[], float] | None = None,
) -> tuple[float, float, bool]:
    """(GB/s, unix time measured, came_from_cache): the cached figure for this CPU + RAM, else a new one.

    `measure` defaults to `measure_read_bandwidth()`; the result is cached in `cache_dir` when given.
    """
    if cache_dir is not None and not refresh:
        hit = cached_cpu_bandwidth(cache_dir, cpu_brand, total_ram_bytes)
        if hit is not None:
            return hit[0], hit[1], True
    gbps = float((measure or measure_read_bandwidth)())
    now = time.time()
    if cache_dir is not None:
        path = Path(cache_dir) / CACHE_FILE_NAME
        entries = _read_cache(path)
        entries[cache_key(cpu_brand, total_ram_bytes)] = {"gbps": gbps, "measured_at": now}
        try:
            atomic_write_text(path, json.dumps(entries, indent=2, sort_keys=True))
        except OSError as exc:
            logger.warning("could not cache bandwidth in %s: %s", path, exc)
    return gbps, now, False
