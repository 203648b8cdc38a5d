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
    """The run was cancelled. `partial`: a report of what was measured before (marked partial), if anything."""

    def __init__(self, message: str, partial: BenchReport | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class BenchError(HearthError):
    """The benchmark could not run (no model, no server, every request failed, ...)."""


@dataclass(frozen=True)
class Progress:
    done: int  # requests finished, warm-up included
    total: int
    phase: str  # "warm-up", "512 tokens × 4 users, run 2/3", "shared prefix, 8192 tokens"
    # The work done of the whole run, 0..1: prompt and generated tokens (the batch in flight counted per
    # token), so the bar moves within a long request; None before the first request is sized.
    work: float | None = None
    step: str = ""  # within the batch in flight: "reading the prompt", "37 of 128 tokens"
    eta_s: float | None = None  # the time left, from the pace so far (None: too early to say)

    @property
    def fraction(self) -> float:
        if self.work is not None:
            return min(1.0, max(0.0, self.work))
        return min(1.0, self.done / self.total) if self.total else 1.0


PREFILL_WEIGHT = 0.1  # a prompt token costs about a tenth of a generated one (a prompt is read in batches)
TICK_S = 0.25  # the most often a token reports progress

# Called on the thread that runs `Driver.run` after every batch, and on the runner's receiving thread (the
# engine host's, a client's) as tokens arrive, at most every TICK_S; keep it quick and thread-safe (the GUI
# re-posts it to the UI thread).
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
        self.closing_notes: list[str] = []  # what `finish` did that a reader should know (a model restored)
        self._cells: list[CellResult] = []
        self._current: tuple[int, int, list[Sample], float] | None = None  # the cell being measured: its samples, start
        # Progress by work (see Progress.work): the total, what finished batches did, the batch in flight.
        self._work_total = 0.0
        self._work_done = 0.0
        self._flight: tuple[int, int, str] | None = None  # its prompt length, requests and phase
        self._tokens = 0  # tokens the batch in flight has received
        self._last_tick = 0.0
        self.tick_s = TICK_S
        self._started = 0.0  # when the measured schedule began (after the load)

    # -- what a runner supplies --------------------------------------------------------------------
    def prepare(self) -> None:
        """Load the model / reach the server. Checks `self.cancel` where it can."""

    def finish(self) -> None:
        """Always called once `prepare` was, whether it, the run or nothing failed (or was cancelled)."""

    def count_tokens(self, messages: Messages) -> int:
        raise NotImplementedError

    def send(self, batch: list[Messages]) -> list[Sample]:
        """Send the batch's requests at once (max_tokens = the workload's gen_len) and wait for all; call
        `token()` for each generated token as it arrives (any thread), so progress moves within a request."""
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
        the cancel flag is set (with a partial report when a cell had measured anything), BenchError /
        HearthError when it cannot run."""
        w = self.workload
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        self._done = 0
        self._cells = []
        self._work_total = self._schedule_work()
        self.check_cancel()
        cancelled: BenchCancelled | None = None
        prefix: list[SharedPrefixResult] = []
        try:
            try:
                self.prepare()
                self.check_cancel()
                self._started = time.perf_counter()
                maker = PromptMaker(fit_tokens(self.count_tokens))
                for length in w.prompt_lens:
                    # Unmeasured requests of each length first: the engine sizes its buffers for a new batch
                    # shape on the first one, which would otherwise land in the measured TTFT.
                    for i in range(w.warmup):
                        phase = f"warm-up, {length} tokens"
                        self._batch([maker.messages(length, self._tag("warmup", i))], phase, length)
                    for c in w.concurrency:
                        self._cells.append(self._cell(maker, length, c))
                if not any(c.completed for c in self._cells):
                    errors = sorted({e for c in self._cells for e in c.errors})
                    raise BenchError("every request failed: " + ("; ".join(errors[:3]) or "no reply"))
                prefix = [self._prefix(maker, p) for p in w.prefix_lens]
            except BenchCancelled as exc:
                cancelled = exc
                if self._current is not None:  # the cell cut short: what it measured so far
                    length, users, samples, began = self._current
                    if any(s.ok for s in samples):
                        wall = time.perf_counter() - began
                        self._cells.append(cell_result(length, users, samples, wall, self.prediction(length)))
                if not any(c.completed for c in self._cells):
                    raise
        finally:
            self.finish()
        cells = self._cells
        described = self.describe()
        peaks = [c.peak_memory_bytes for c in cells if c.peak_memory_bytes]
        memory = self.memory(max(peaks) if peaks else None)
        if cancelled is None:
            self.calibrate(cells)
        notes = described.notes + self.closing_notes + _short_replies(cells, w.gen_len)
        if cancelled is not None:
            done = sum(c.completed for c in cells)
            notes.insert(0, f"partial: cancelled after {done} measured requests; the cells not reached are missing")
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
            notes=notes,
            partial=cancelled is not None,
        )
        if cancelled is not None:
            raise BenchCancelled("the benchmark was cancelled; a partial report was kept", partial=report)
        return report

    def _tag(self, *parts: object) -> str:
        """Unique from its first character on, so a request shares no cached prefix with the one before."""
        self._sent += 1
        return "-".join([f"r{self._sent}", *map(str, parts), self._nonce])

    def _request_work(self, prompt_len: int, requests: int = 1) -> float:
        return requests * (prompt_len * PREFILL_WEIGHT + self.workload.gen_len)

    def _schedule_work(self) -> float:
        w = self.workload
        warmup = sum(self._request_work(n, w.warmup) for n in w.prompt_lens)
        cells = sum(self._request_work(n, c * w.runs) for n, c in w.cells)
        return warmup + cells + sum(self._request_work(n, 2 * w.runs) for n in w.prefix_lens)

    def _batch(self, batch: list[Messages], phase: str, prompt_len: int) -> list[Sample]:
        self.check_cancel()
        self._flight, self._tokens = (prompt_len, len(batch), phase), 0
        self._report(force=True)
        samples = self.send(batch)
        self.check_cancel()
        self._flight = None
        self._done += len(batch)
        self._work_done += self._request_work(prompt_len, len(batch))
        self._report(force=True, phase=phase)
        return samples

    def token(self) -> None:
        """Any thread: one generated token of the batch in flight arrived."""
        self._tokens += 1  # a progress count: a lost increment between threads costs nothing
        self._report()

    def _report(self, *, force: bool = False, phase: str | None = None) -> None:
        now = time.perf_counter()
        if self.progress is None or (not force and now - self._last_tick < self.tick_s):
            return
        self._last_tick = now
        work, step = self._work_done, ""
        flight = self._flight
        if flight is not None:
            prompt_len, requests, phase = flight
            expected = requests * self.workload.gen_len
            tokens = min(self._tokens, expected)
            if tokens:
                work += self._request_work(prompt_len, requests) - (expected - tokens)
                step = f"{tokens:,} of {expected:,} tokens generated"
            else:
                step = f"reading the {prompt_len:,}-token prompt" + ("s" if requests > 1 else "")
        fraction = work / self._work_total if self._work_total else None
        elapsed = now - self._started if self._started else 0.0
        eta = elapsed * (1 - fraction) / fraction if fraction and fraction >= 0.02 and elapsed > 0 else None
        self.progress(Progress(self._done, self.workload.total_requests(), phase or "", fraction, step, eta))

    def _cell(self, maker: PromptMaker, prompt_len: int, concurrency: int) -> CellResult:
        w = self.workload
        samples: list[Sample] = []
        self._current = (prompt_len, concurrency, samples, time.perf_counter())
        wall = 0.0
        users = "1 user" if concurrency == 1 else f"{concurrency} users"
        for r in range(w.runs):
            batch = [maker.messages(prompt_len, self._tag(prompt_len, concurrency, r, i)) for i in range(concurrency)]
            t = time.perf_counter()
            phase = f"{prompt_len} tokens × {users}, run {r + 1}/{w.runs}"
            samples += self._batch(batch, phase, prompt_len)
            wall += time.perf_counter() - t
        self._current = None
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
                [maker.messages(prompt_len, self._tag("c", r), shared=w.shared_prefix, prefix_seed=seed)],
                phase,
                prompt_len,
            )
            warm += self._batch(
                [maker.messages(prompt_len, self._tag("w", r), shared=w.shared_prefix, prefix_seed=seed)],
                phase,
                prompt_len,
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
