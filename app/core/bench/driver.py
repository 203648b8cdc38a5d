"""The schedule every benchmark follows, whatever it runs on: size the prompts with the engine's own
token count, warm up, then each (prompt length, concurrency) cell `runs` times, then the shared-prefix
pairs; progress after every batch, the cancel flag checked before every batch and while one runs.

A runner (runner.py: the engine host; endpoint.py: an OpenAI-compatible server) supplies how to count a
prompt's tokens, how to send a batch of concurrent requests, and what describes the engine.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from app import __version__
from app.core.bench.measure import Sample, cell_result
from app.core.bench.prompts import Messages, PromptMaker, fit_tokens
from app.core.bench.report import (
    BenchReport,
    CellResult,
    EngineRecord,
    MemoryResult,
    ModelRecord,
    Prediction,
    SharedPrefixResult,
    WeightsRecord,
)
from app.core.bench.stats import summarize
from app.core.bench.workload import Workload
from app.core.errors import HearthError

logger = logging.getLogger(__name__)


class BenchCancelled(HearthError):
    """The run was cancelled; nothing was saved."""


class BenchError(HearthError):
    """The benchmark could not run (no model, no server, every request failed, ...)."""


@dataclass(frozen=True)
class Progress:
    done: int  # requests finished, warm-up included
    total: int
    phase: str  # "warm-up", "512 tokens × 4 users, run 2/3", "shared prefix, 8192 tokens"

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0


# Called on the thread that runs `Driver.run` (a background thread in the GUI: re-post to the UI thread),
# after every batch; keep it quick.
ProgressCallback = Callable[[Progress], None]


@dataclass
class Described:
    """What a runner knows about what it measured."""

    model: ModelRecord
    weights: WeightsRecord
    engine: EngineRecord
    hardware: dict
    notes: list[str]


class Driver:
    def __init__(
        self,
        workload: Workload,
        *,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.workload = workload
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self._done = 0
        self._sent = 0
        self._nonce = uuid.uuid4().hex[:8]  # no two bench runs share a cached prompt either

    # -- what a runner supplies --------------------------------------------------------------------
    def prepare(self) -> None:
        """Load the model / reach the server. Checks `self.cancel` where it can."""

    def finish(self) -> None:
        """Always called once `prepare` was, whether it, the run or nothing failed (or was cancelled)."""

    def count_tokens(self, messages: Messages) -> int:
        raise NotImplementedError

    def send(self, batch: list[Messages]) -> list[Sample]:
        """Send the batch's requests at once (max_tokens = the workload's gen_len) and wait for all."""
        raise NotImplementedError

    def describe(self) -> Described:
        raise NotImplementedError

    def prediction(self, prompt_len: int) -> Prediction | None:
        return None

    def memory(self, peak: int | None) -> MemoryResult:
        return MemoryResult(target_ctx=self.workload.target_ctx, peak_bytes=peak)

    def calibrate(self, cells: list[CellResult]) -> None:
        """Feed the measured speeds to the planner's calibration (local runs)."""

    # -- the schedule ------------------------------------------------------------------------------
    def check_cancel(self) -> None:
        if self.cancel.is_set():
            raise BenchCancelled("the benchmark was cancelled; no report was saved")

    def run(self) -> BenchReport:
        """Run the workload and build its report (not saved: see store.py). Raises BenchCancelled when
        the cancel flag is set, BenchError / HearthError when it cannot run."""
        w = self.workload
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        self._done = 0
        self.check_cancel()
        try:
            self.prepare()
            self.check_cancel()
            maker = PromptMaker(fit_tokens(self.count_tokens))
            cells = []
            for length in w.prompt_lens:
                # Unmeasured requests of each length first: the engine sizes its buffers for a new batch
                # shape on the first one, which would otherwise land in the measured TTFT.
                for i in range(w.warmup):
                    self._batch([maker.messages(length, self._tag("warmup", i))], f"warm-up, {length} tokens")
                cells += [self._cell(maker, length, c) for c in w.concurrency]
            if not any(c.completed for c in cells):
                errors = sorted({e for c in cells for e in c.errors})
                raise BenchError("every request failed: " + ("; ".join(errors[:3]) or "no reply"))
            prefix = [self._prefix(maker, p) for p in w.prefix_lens]
            described = self.describe()
            peaks = [c.peak_memory_bytes for c in cells if c.peak_memory_bytes]
            memory = self.memory(max(peaks) if peaks else None)
        finally:
            self.finish()
        self.calibrate(cells)
        report = BenchReport(
            id=_report_id(started_at, described.model.name, described.engine.name),
            created_at=started_at.isoformat(timespec="seconds"),
            hearth_version=__version__,
            duration_s=time.perf_counter() - t0,
            model=described.model,
            weights=described.weights,
            engine=described.engine,
            hardware=described.hardware,
            workload=w,
            warmup_requests=w.warmup * len(w.prompt_lens),
            runs=w.runs,
            cells=cells,
            shared_prefix=prefix,
            memory=memory,
            notes=described.notes + _short_replies(cells, w.gen_len),
        )
        return report

    def _tag(self, *parts: object) -> str:
        """Unique from its first character on, so a request shares no cached prefix with the one before."""
        self._sent += 1
        return "-".join([f"r{self._sent}", *map(str, parts), self._nonce])

    def _batch(self, batch: list[Messages], phase: str) -> list[Sample]:
        self.check_cancel()
        samples = self.send(batch)
        self.check_cancel()
        self._done += len(batch)
        if self.progress is not None:
            self.progress(Progress(self._done, self.workload.total_requests(), phase))
        return samples

    def _cell(self, maker: PromptMaker, prompt_len: int, concurrency: int) -> CellResult:
        w = self.workload
        samples: list[Sample] = []
        wall = 0.0
        users = "1 user" if concurrency == 1 else f"{concurrency} users"
        for r in range(w.runs):
            batch = [maker.messages(prompt_len, self._tag(prompt_len, concurrency, r, i)) for i in range(concurrency)]
            t = time.perf_counter()
            samples += self._batch(batch, f"{prompt_len} tokens × {users}, run {r + 1}/{w.runs}")
            wall += time.perf_counter() - t
        return cell_result(prompt_len, concurrency, samples, wall, self.prediction(prompt_len))

    def _prefix(self, maker: PromptMaker, prompt_len: int) -> SharedPrefixResult:
        """Per run a new prefix: its first request finds nothing cached (cold), the next reuses it (warm)."""
        w = self.workload
        cold: list[Sample] = []
        warm: list[Sample] = []
        for r in range(w.runs):
            seed = hash((self._nonce, prompt_len, r)) & 0xFFFFFF
            phase = f"shared prefix, {prompt_len} tokens, run {r + 1}/{w.runs}"
            cold += self._batch(
                [maker.messages(prompt_len, self._tag("c", r), shared=w.shared_prefix, prefix_seed=seed)], phase
            )
            warm += self._batch(
                [maker.messages(prompt_len, self._tag("w", r), shared=w.shared_prefix, prefix_seed=seed)], phase
            )
        cold_t = summarize(s.ttft_s for s in cold if s.ok)
        warm_t = summarize(s.ttft_s for s in warm if s.ok)
        cached = [s.cached_tokens for s in warm if s.ok and s.cached_tokens is not None]
        return SharedPrefixResult(
            prompt_len=prompt_len,
            prefix_tokens=w.shared_prefix,
            cached_tokens=sum(cached) / len(cached) if cached else None,
            ttft_cold_s=cold_t,
            ttft_warm_s=warm_t,
            speedup=cold_t.p50 / warm_t.p50 if cold_t and warm_t and warm_t.p50 > 0 else None,
        )


def _report_id(at: datetime, model: str, engine: str) -> str:
    stem = model.rsplit("/", 1)[-1].removesuffix(".gguf")[:60]
    return f"{at:%Y%m%d-%H%M%S}-{stem}-{engine}".replace(" ", "-")


def _short_replies(cells: list[CellResult], gen_len: int) -> list[str]:
    short = [c for c in cells if c.completed and c.output_tokens < 0.9 * gen_len]
    if not short:
        return []
    return [
        f"some replies ended before {gen_len} tokens (the model stopped on its own; mean "
        f"{min(c.output_tokens for c in short):.0f} tokens at the shortest): decode rates are over fewer tokens"
    ]
