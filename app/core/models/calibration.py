"""Per-machine calibration: measured tok/s of real runs, used to correct the speed model's η."""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core.atomic import atomic_write_text

logger = logging.getLogger(__name__)

MAX_RUNS = 50  # per backend; old runs drop off so a driver update is learned again
MIN_RUNS = 1
# Which speed model made `predicted_decode`: a ratio against an older formula would mis-correct the new one,
# so only runs predicted by this version count. 2: per-class η, host cost per vocab entry (issue 15).
MODEL_VERSION = 2


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

    def correction(self, backend: str) -> Correction:
        runs = [r for r in self.runs(backend) if r.model_version == MODEL_VERSION]
        if len(runs) < MIN_RUNS:
            return Correction()
        decode = statistics.median(r.measured_decode / r.predicted_decode for r in runs)
        pre = [r.measured_prefill / r.predicted_prefill for r in runs if r.predicted_prefill and r.measured_prefill]
        return Correction(decode=decode, prefill=statistics.median(pre) if pre else 1.0, runs=len(runs))
