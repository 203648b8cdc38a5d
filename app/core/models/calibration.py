"""Per-machine calibration: measured tok/s of real runs, used to correct the speed model's η.

The correction depends on the model's size (small models are bound by per-layer costs, large ones by
bandwidth, and the model misses the two differently), so it is learned from the runs nearest in size;
runs measured while other processes kept the cores busy say nothing about the machine and are ignored."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)

MAX_RUNS = 50  # per backend; old runs drop off so a driver update is learned again
MIN_RUNS = 1
# Which speed model made `predicted_decode`: a ratio against an older formula would mis-correct the new one,
# so only runs predicted by this version count. 2: per-class η, host cost per vocab entry (issue 15). 3: the
# CPU term from this CPU's measured per-type rates and per-layer cost (issue 30), 30-40 % below the table here.
MODEL_VERSION = 3
# A run is ignored when other processes kept more than this share of the cores busy: llama.cpp's threads wait
# for each other at every op, so one busy core slows a decode step by far more than its share.
BUSY_OTHER_LOAD = 0.3
# Runs weigh by closeness in size: a Gaussian in log2(bytes read per token), this many doublings wide.
SIZE_WIDTH_DOUBLINGS = 1.0
# With no run near the model's size, the correction fades towards none: at this many doublings from the
# nearest run it is applied to the power e^-1/2 (a 64x larger model gets a seventh of it in log terms).
SIZE_FADE_DOUBLINGS = 3.0


@dataclass
class SpeedRun:
    backend: str  # "cpu", "cuda", "metal"
    model: str  # file name or repo:quant, for the user's eyes
    predicted_decode: float  # tok/s the uncalibrated model predicted
    measured_decode: float  # tok/s the engine reported
    predicted_prefill: float = 0.0
    measured_prefill: float = 0.0
    at: float = 0.0
    model_version: int = MODEL_VERSION
    model_bytes: int = 0  # weight bytes a token reads (ModelSpec.bytes_per_token_read); 0: not recorded
    load_per_core: float | None = None  # 1-minute load average ÷ logical cores at the run's end
    own_share: float | None = None  # this process's share of all cores over about the last minute

    @property
    def busy(self) -> bool:
        """Measured while other processes kept the cores busy (unknown: not busy)."""
        if self.load_per_core is None or self.own_share is None:
            return False
        return self.load_per_core - self.own_share > BUSY_OTHER_LOAD


@dataclass(frozen=True)
class Correction:
    decode: float = 1.0  # measured ÷ predicted (median)
    prefill: float = 1.0
    runs: int = 0

    @property
    def basis(self) -> str:
        if not self.runs:
            return "uncalibrated"
        return f"calibrated on {self.runs} run{'s' if self.runs != 1 else ''}"


class CalibrationStore:
    """JSON file in the cache dir; `record` is called by the engine host after every run."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _load(self) -> list[SpeedRun]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            # A run written before the field existed was predicted by version 1.
            return [SpeedRun(**{"model_version": 1, **r}) for r in raw.get("runs", [])]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("calibration file %s unreadable (%s); starting afresh", self.path, exc)
            return []

    def runs(self, backend: str | None = None) -> list[SpeedRun]:
        with self._lock:
            return [r for r in self._load() if backend is None or r.backend == backend]

    def record(self, run: SpeedRun) -> None:
        if run.measured_decode <= 0 or run.predicted_decode <= 0:
            return
        run.at = run.at or time.time()
        with self._lock:
            runs = self._load() + [run]
            mine = [r for r in runs if r.backend == run.backend][-MAX_RUNS:]
            others = [r for r in runs if r.backend != run.backend]
            atomic_write_text(self.path, json.dumps({"runs": [asdict(r) for r in others + mine]}, indent=1))

    def correction(self, backend: str, model_bytes: int | None = None) -> Correction:
        """The correction for a model reading `model_bytes` per token, from the runs nearest in size (None:
        every run alike, as before sizes were recorded). Busy and old-model runs do not count."""
        runs = [r for r in self.runs(backend) if r.model_version == MODEL_VERSION and not r.busy]
        if len(runs) < MIN_RUNS:
            return Correction()
        sized = [r for r in runs if r.model_bytes > 0]
        if not model_bytes or model_bytes <= 0 or not sized:
            weights = [1.0] * len(runs)
            fade = 1.0
        else:
            runs = sized
            dist = [abs(math.log2(r.model_bytes / model_bytes)) for r in runs]
            near = min(dist)
            # Relative to the nearest run, so the nearest sizes decide even when every run is far away.
            weights = [math.exp(-0.5 * ((d**2 - near**2) / SIZE_WIDTH_DOUBLINGS**2)) for d in dist]
            fade = math.exp(-0.5 * (near / SIZE_FADE_DOUBLINGS) ** 2)
        decode = _weighted_median([(r.measured_decode / r.predicted_decode, w) for r, w in zip(runs, weights)])
        pre = [
            (r.measured_prefill / r.predicted_prefill, w)
            for r, w in zip(runs, weights)
            if r.predicted_prefill and r.measured_prefill
        ]
        return Correction(
            decode=decode**fade,
            prefill=_weighted_median(pre) ** fade if pre else 1.0,
            runs=sum(w >= 0.1 for w in weights),
        )


def _weighted_median(pairs: list[tuple[float, float]]) -> float:
    """The value at half the total weight (the mean of the two middle values when it falls between)."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    seen = 0.0
    for i, (value, w) in enumerate(pairs):
        seen += w
        if math.isclose(seen, total / 2, rel_tol=1e-9) and i + 1 < len(pairs):
            return (value + pairs[i + 1][0]) / 2
        if seen > total / 2:
            return value
    return pairs[-1][0]
