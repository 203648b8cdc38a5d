"""Measure how fast each weight type decodes on this CPU, once per CPU and llama.cpp build.

`measure_quant_speeds(cache_dir)` runs `quant_probe_child` in a child process with a hard timeout and caches
the figures (hardware/quant_speed.py) where the speed model reads them. A crash (a signal) or a timeout is
no measurement: the speed model keeps its table, and the failure is remembered for RETRY_FAILED_AFTER_S so
a CPU whose kernels crash is not probed again at every start. `start_quant_probe` runs it in the background.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.hardware.quant_speed import (
    MAX_LAYER_S,
    QuantSpeeds,
    host_key,
    read_entry,
    write_failure,
    write_quant_speeds,
)
from app.core.models.speed import HOST_COPY_S_PER_ENTRY, T0_TOKEN, T_LAYER_CPU

logger = logging.getLogger(__name__)

CHILD_MODULE = "app.core.bench.quant_probe_child"
# The families a hub repo offers most; other types keep their table ratio to the measured Q4_K.
DEFAULT_TYPES = ("F16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_1", "Q4_0")
TOKENS = 12  # timed tokens per round (three rounds): 10-25 ms each on the ~100-400 MB probe model
# Quantizing and writing each type's model is most of the time: ~35 s for the seven types on a quiet 2-core
# VM, so a hang is told from a slow (or busy) machine by a wide margin.
TIMEOUT_S = 180.0
RETRY_FAILED_AFTER_S = 7 * 24 * 3600.0
WORK_PREFIX = "quant-probe-"  # the probe's temporary folder in the cache dir
# At least this share of a token's time is taken as weight reads, so a machine whose fixed costs the table
# over-states (a fast CPU) does not divide by ~0.
MIN_READ_SHARE = 0.25
# The background probe waits while the 1-minute load average per core is above this: llama.cpp's threads
# stall on a busy core, and a figure measured then would describe the neighbour, not the CPU.
BUSY_LOAD_PER_CORE = 0.5
WAIT_QUIET_S = 600.0

_lock = threading.Lock()


@dataclass(frozen=True)
class ChildResult:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str


def run_child(command: Sequence[str], timeout_s: float) -> ChildResult:
    """Run `command`; at the timeout kill it and keep what it printed."""
    proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return ChildResult(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return ChildResult(None, out, err)


def type_rate(row: dict[str, Any], layer_s: float = T_LAYER_CPU) -> float:
    """GB/s one probe row's weights streamed at: bytes read per token over the token's time less the speed
    model's fixed per-token and per-layer terms (`layer_s` as measured here). See hardware/quant_speed.py."""
    seconds = float(row["seconds"])
    fixed = T0_TOKEN + int(row["layers"]) * layer_s + int(row.get("vocab", 0)) * HOST_COPY_S_PER_ENTRY
    reading = max(seconds - fixed, MIN_READ_SHARE * seconds)
    return float(row["bytes_read"]) / reading / 1e9


def parse_output(stdout: str) -> QuantSpeeds | None:
    """The figures in the child's output, or None unless it got to the end (a partial run is discarded)."""
    rows: list[dict[str, Any]] = []
    layer: dict[str, Any] = {}
    done = False
    for line in stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue  # llama.cpp may print to stdout too
        if not isinstance(item, dict):
            continue
        if item.get("done"):
            done = True
        elif "layer_s" in item:
            layer = item
        elif {"type", "seconds", "bytes_read", "layers"} <= item.keys():
            rows.append(item)
    if not done or not rows:
        return None
    try:
        layer_s: float | None = float(layer["layer_s"]) if layer else None
        if layer_s is not None and not 0 < layer_s < MAX_LAYER_S:
            logger.warning("quant probe: per-layer cost %.3g s is no measurement; the table's", layer_s)
            layer_s = None
        rates = {str(r["type"]).upper(): type_rate(r, layer_s or T_LAYER_CPU) for r in rows}
        bw = max(float(r.get("bandwidth_gbps") or 0.0) for r in rows)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        logger.warning("quant probe output unusable: %s", exc)
        return None
    detail: dict[str, Any] = {
        str(r["type"]).upper(): {k: r[k] for k in ("seconds", "bytes_read", "layers") if k in r} for r in rows
    }
    if layer:
        detail["layers"] = {k: layer[k] for k in ("thin_seconds", "thin_layers") if k in layer}
    return QuantSpeeds(rates, layer_s, bw, time.time(), detail)


def child_command(
    folder: Path, types: Sequence[str], threads: int, shape: dict[str, int] | None = None, extra_bufts: bool = True
) -> list[str]:
    """The child's command line; `shape` overrides the probe model's (a smaller one for tests); `extra_bufts`
    off loads the probe models without llama.cpp's extra CPU buffer types, as the native canary would."""
    args = {"dir": str(folder), "types": list(types), "threads": threads, "tokens": TOKENS, "shape": shape or {}}
    args["extra_bufts"] = extra_bufts
    args["parent"] = os.getpid()  # the child stops between types once the app has gone
    if getattr(sys, "frozen", False):  # a bundle has no `-m`: its own program hands the flag to the child
        return [sys.executable, "--hearth-quant-probe", json.dumps(args)]
    return [sys.executable, "-m", CHILD_MODULE, json.dumps(args)]


def _default_threads() -> int:
    from app.core.engines.llamacpp.options import default_threads

    return default_threads()  # what a load uses, so the probe sees the same barriers and bandwidth


def measure_quant_speeds(
    cache_dir: Path,
    refresh: bool = False,
    *,
    types: Sequence[str] = DEFAULT_TYPES,
    timeout_s: float = TIMEOUT_S,
    command: Sequence[str] | None = None,
) -> QuantSpeeds | None:
    """This CPU's measured per-type speeds: cached for this CPU and llama.cpp build, else measured now
    (tens of seconds: call it from a worker thread or the CLI). None when it cannot be measured or the
    last try failed recently; the speed model then keeps its table. `command` replaces the child (tests)."""
    cache_dir = Path(cache_dir)
    key = host_key()
    if not refresh:
        known, cached = _cached(cache_dir, key)
        if known:
            return cached
    with _lock:  # one probe at a time: two would halve each other's bandwidth
        known, cached = _cached(cache_dir, key)
        if known and not refresh:
            return cached  # another thread measured it while this one waited
        cache_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_work(cache_dir)
        load = load_per_core()
        if machine_busy():
            logger.warning("quant probe: the machine is busy (load %.1f per core); the figures may be low", load)
        t0 = time.perf_counter()
        extra_bufts = _extra_bufts_survive()
        with tempfile.TemporaryDirectory(prefix=WORK_PREFIX, dir=cache_dir) as tmp:
            res = run_child(
                command or child_command(Path(tmp), types, _default_threads(), None, extra_bufts), timeout_s
            )
        if command is None and extra_bufts and res.returncode is not None and res.returncode < 0:
            # Died by a signal: llama.cpp's extra buffer types (AMX on some Xeons) are the usual cause.
            logger.warning(
                "quant probe: the child died of signal %d; again without extra buffer types", -res.returncode
            )
            with tempfile.TemporaryDirectory(prefix=WORK_PREFIX, dir=cache_dir) as tmp:
                res = run_child(child_command(Path(tmp), types, _default_threads(), None, False), timeout_s)
        result = parse_output(res.stdout) if res.returncode == 0 else None
        if result is None:
            reason = _failure(res, timeout_s)
            logger.warning("quant probe: %s; predicting from the table (%s)", reason, res.stderr[-500:].strip())
            _save(write_failure, cache_dir, key, reason)
            return None
        logger.info(
            "quant probe: %s in %.1f s",
            describe(result),
            time.perf_counter() - t0,
        )
        result = dataclasses.replace(result, load_per_core=load)
        _save(write_quant_speeds, cache_dir, key, result)
        return result


def describe(result: QuantSpeeds) -> str:
    """One line for logs and the CLI: each type's rate, and the per-layer cost."""
    rates = ", ".join(f"{t} {v:.1f} GB/s" for t, v in sorted(result.rates_gbps.items()))
    layer = f"{result.layer_s * 1e3:.3f} ms per layer" if result.layer_s else "per-layer cost not measured"
    return f"{rates}; {layer}"


def _extra_bufts_survive() -> bool:
    """False when the native canary turned llama.cpp's extra buffer types off for this build here."""
    from app.core.hardware.native_checks import records_here, turned_off_here
    from app.core.native import import_native

    try:
        records = records_here(import_native("llama_cpp"))
    except Exception as exc:  # no llama.cpp to ask about: the child will say so itself
        logger.debug("no native-check verdict for the quant probe: %s", exc)
        return True
    return "extra_bufts" not in turned_off_here(records)


def _remove_stale_work(cache_dir: Path) -> None:
    """Work folders a probe left when the app exited mid-run (its temporary folder was never removed)."""
    for folder in cache_dir.glob(f"{WORK_PREFIX}*"):
        try:
            if folder.is_dir() and time.time() - folder.stat().st_mtime > 2 * TIMEOUT_S:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def _cached(cache_dir: Path, key: str) -> tuple[bool, QuantSpeeds | None]:
    """(whether the cache decides, what it says): the figures, or None after a recent failure."""
    entry = read_entry(cache_dir, key)
    if entry is None:
        return False, None
    if isinstance(entry, QuantSpeeds):
        return True, entry
    return time.time() - entry < RETRY_FAILED_AFTER_S, None


def _failure(res: ChildResult, timeout_s: float) -> str:
    if res.returncode is None:
        return f"timed out after {timeout_s:.0f} s"
    if res.returncode < 0:
        return f"the child died of signal {-res.returncode}"
    if res.returncode:
        return f"the child exited with {res.returncode}"
    return "the child printed no complete measurement"


def _save(write: Any, cache_dir: Path, key: str, value: Any) -> None:
    try:
        write(cache_dir, key, value)
    except OSError as exc:  # a read-only cache costs the cache, not the figures of this run
        logger.warning("could not cache the quant probe result in %s: %s", cache_dir, exc)


def load_per_core() -> float | None:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # no load average (Windows)
        return None


def machine_busy() -> bool:
    load = load_per_core()
    return load is not None and load > BUSY_LOAD_PER_CORE


def start_quant_probe(
    cache_dir: Path, *, delay_s: float = 0.0, wait_quiet_s: float = WAIT_QUIET_S
) -> threading.Thread | None:
    """Measure in a daemon thread unless this CPU and build already have figures (or a recent failure).
    `delay_s` lets the app finish starting first; then it waits up to `wait_quiet_s` for a quiet machine,
    else leaves the probe to the next start (the table meanwhile)."""
    if _cached(Path(cache_dir), host_key())[0]:
        return None

    def run() -> None:
        time.sleep(delay_s)
        waited = 0.0
        while machine_busy() and waited < wait_quiet_s:
            time.sleep(30.0)
            waited += 30.0
        if machine_busy():
            logger.info("quant probe: the machine stayed busy; measuring at a later start")
            return
        try:
            measure_quant_speeds(cache_dir)
        except Exception:  # never take the app down for a measurement
            logger.exception("quant probe failed")

    thread = threading.Thread(target=run, name="hearth-quant-probe", daemon=True)
    thread.start()
    return thread
