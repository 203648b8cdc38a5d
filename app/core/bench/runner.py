"""A workload through the JobHost: each request a GenerateJob, a batch of concurrent requests submitted at
once. The model runs as it is loaded when that has the context the workload needs; else it is loaded with
the workload's context, and afterwards the loads are put back as they were (loads.py): a benchmark never
changes what the chat runs. Requests beyond the loaded slots wait in the host's FIFO queue: their TTFT
includes that wait (reported apart as `queue_wait_s`).

`run()` blocks the calling thread (in the GUI: a background thread); `progress` is called on that thread,
the host's sinks on the host thread. Setting `cancel` stops the run within a token or prompt batch of the
running request and skips the queued ones; `run()` then raises BenchCancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.core.bench.describe import (
    Planned,
    engine_record,
    headroom,
    model_record,
    plan_for,
    weights_record,
)
from app.core.bench.driver import BenchError, Described, Driver, ProgressCallback
from app.core.bench.loads import LoadsBefore, describe_load, restore
from app.core.bench.measure import Sample
from app.core.bench.prompts import Messages
from app.core.bench.report import CellResult, MemoryResult, Prediction
from app.core.bench.workload import Workload
from app.core.engines.base import ChatMessage, GenerateRequest, LoadSpec, ModelInfo, SamplingParams
from app.core.errors import HearthError
from app.core.hardware.profile import HardwareProfile
from app.core.models.calibration import CalibrationStore, SpeedRun
from app.core.runtime.calibrate import MIN_CALIBRATION_TOKENS
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import (
    ChunkEvent,
    CountJob,
    GenerateJob,
    HostEvent,
    JobDone,
    JobFailed,
    JobHandle,
    LoadJob,
)

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how often a wait looks at the cancel flag
LOAD_TIMEOUT_S = 1800.0
REQUEST_TIMEOUT_S = 3600.0


class HostRunner(Driver):
    """Benchmark `load.path` (format `fmt`) on `host`.

    `calibration` corrects the predictions shown and takes the measured speeds, unless `feed_calibration`
    is off or the host records every run itself (so nothing is counted twice). `sha256`: the weights'
    digest when known (the library's), else the file is hashed. `model_name`: what the user calls it (a
    library name); default the model's own name. `hardware`: this machine's profile (probed if None).
    `model_ref`: the name its jobs carry (a library id), so a pool runs them on this model whichever model
    the chat has in focus; None: jobs run on what is loaded (a single host)."""

    def __init__(
        self,
        host: JobHost,
        load: LoadSpec,
        fmt: str,
        workload: Workload,
        *,
        calibration: CalibrationStore | None = None,
        hardware: HardwareProfile | None = None,
        sha256: str | None = None,
        model_name: str | None = None,
        model_ref: str | None = None,
        plan_check: bool = True,
        feed_calibration: bool = True,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        super().__init__(workload, progress=progress, cancel=cancel)
        if load.n_ctx < workload.needed_ctx:
            raise BenchError(
                f"the load's context ({load.n_ctx}) is shorter than the workload needs ({workload.needed_ctx})"
            )
        self.host = host
        self.load = load
        self.fmt = fmt
        self.calibration = calibration
        self.hardware = hardware
        self.sha256 = sha256
        self.model_name = model_name
        self.model_ref = model_ref
        self.before: LoadsBefore | None = None
        self.reused = False  # measured on the model as it was loaded: nothing to put back
        self.plan_check = plan_check
        self.feed_calibration = feed_calibration
        self.planned: Planned | None = None
        self.info: ModelInfo | None = None

    # -- Driver ------------------------------------------------------------------------------------
    def prepare(self) -> None:
        most = max(self.workload.concurrency)
        if most > self.host.queue_size:
            raise BenchError(
                f"{most} concurrent requests do not fit the engine's queue ({self.host.queue_size} places); "
                "lower the concurrency or raise the queue size (Settings → Server)"
            )
        path = Path(self.load.path)
        self.before = LoadsBefore.look(self.host, path)
        loaded = self.before.reusable(self.workload.needed_ctx)
        if loaded is not None and self.before.mine is not None:
            self.load, self.info, self.reused = loaded, self.before.mine.state.model, True
            self.planned = plan_for(path, self.fmt, self.load, self.calibration)
            return
        # Planned before the load, on the memory free before it (as the host's own fit check does).
        self.planned = plan_for(path, self.fmt, self.load, self.calibration)
        # Not the focus: jobs that name no model (the chat's, the API's) stay on the model they were on.
        job = LoadJob(spec=self.load, format=self.fmt, plan_check=self.plan_check, focus=False)
        self.info = self._wait(self.host.submit(job), LOAD_TIMEOUT_S)

    def finish(self) -> None:
        if self.before is not None and not self.reused:
            self._report(force=True, phase="putting the loaded models back as they were")
            self.closing_notes += restore(self.host, self.before, Path(self.load.path))

    def count_tokens(self, messages: Messages) -> int:
        handle = self.host.submit(CountJob(request=_request(messages, self.workload), model=self.model_ref))
        return self._wait(handle, 120).prompt_tokens

    def send(self, batch: list[Messages]) -> list[Sample]:
        samples = [Sample(submitted=0.0) for _ in batch]
        handles: list[JobHandle] = []
        try:
            for messages, sample in zip(batch, samples):
                sample.submitted = time.perf_counter()
                job = GenerateJob(request=_request(messages, self.workload), source="bench", model=self.model_ref)
                handles.append(self.host.submit(job, _sink(sample, self.token)))
            for handle in handles:
                self._wait(handle, REQUEST_TIMEOUT_S, raise_error=False)
        finally:
            for handle in handles:  # cancelled or interrupted: the queued ones never run
                if not handle.done.is_set():
                    handle.cancel()
        for handle, sample in zip(handles, samples):
            if handle.error is not None:
                sample.error = handle.error
        return samples

    def describe(self) -> Described:
        path = Path(self.load.path)
        spec = self.planned.spec if self.planned else None
        hardware = self.hardware or _probe()
        notes = []
        if self.planned is None:
            notes.append("no prediction: the planner does not know this model's format or shape")
        slots = self.load.slots
        if max(self.workload.concurrency) > slots:
            notes.append(
                f"requests beyond the model's {slots} slot{'s' if slots != 1 else ''} queue in the engine host: "
                "their TTFT includes the wait"
            )
        if self.reused and self.info is not None:
            notes.append(
                f"measured on the model as it was loaded ({describe_load(self.info.n_ctx, slots)}); "
                "nothing was reloaded"
            )
        return Described(
            model=model_record(path, self.info, spec, self.model_name),
            weights=weights_record(path, self.fmt, spec, sha256=self.sha256),
            engine=engine_record(self.fmt, self.load, self.info),
            hardware=hardware.to_dict(),
            notes=notes,
        )

    def prediction(self, prompt_len: int) -> Prediction | None:
        if self.planned is None:
            return None
        return self.planned.prediction(prompt_len + self.workload.gen_len // 2)

    def memory(self, peak: int | None) -> MemoryResult:
        room, device = headroom(self.planned)
        return MemoryResult(
            target_ctx=self.info.n_ctx if self.info else self.load.n_ctx,
            peak_bytes=peak,
            predicted_bytes=self.planned.plan.estimate.total if self.planned else None,
            headroom_bytes=room,
            headroom_device=device,
        )

    def calibrate(self, cells: list[CellResult]) -> None:
        """One SpeedRun per prompt length (its least concurrent cell), through the same store and record
        the host uses after a chat reply; the prediction is the uncalibrated one the store compares with."""
        store, planned = self.calibration, self.planned
        if store is None or planned is None or not self.feed_calibration or self.host.calibration is not None:
            return
        seen: set[int] = set()
        for cell in sorted(cells, key=lambda c: (c.prompt_len, c.concurrency)):
            if cell.prompt_len in seen or not cell.decode_tok_s or cell.output_tokens < MIN_CALIBRATION_TOKENS:
                continue
            seen.add(cell.prompt_len)
            run = SpeedRun(
                backend=planned.backend,
                model=Path(self.load.path).name,
                predicted_decode=planned.raw_decode_at(cell.prompt_len + self.workload.gen_len // 2),
                measured_decode=cell.decode_tok_s,
                predicted_prefill=planned.raw.prefill_tok_s,
                measured_prefill=cell.prefill_tok_s or 0.0,
            )
            try:
                store.record(run)
            except OSError as exc:  # a read-only cache costs calibration, not the report
                logger.warning("could not record the benchmark's speeds: %s", exc)

    # -- waiting -----------------------------------------------------------------------------------
    def _wait(self, handle: JobHandle, timeout: float, *, raise_error: bool = True):
        """Wait for a job, looking at the cancel flag; Ctrl-C or cancel stops the job first."""
        end = time.monotonic() + timeout
        try:
            while not handle.wait(POLL_S):
                if self.cancel.is_set():
                    handle.cancel()
                    handle.wait(30)
                    self.check_cancel()
                if time.monotonic() > end:
                    handle.cancel()
                    raise BenchError(f"the engine did not answer within {timeout:.0f} s")
        except KeyboardInterrupt:
            handle.cancel()
            self.cancel.set()
            raise
        if handle.error is not None and raise_error:
            raise HearthError(handle.error)
        return handle.result


def _request(messages: Messages, workload: Workload) -> GenerateRequest:
    s = workload.sampling
    return GenerateRequest(
        messages=[ChatMessage(role=m["role"], content=m["content"]) for m in messages],
        sampling=SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            min_p=0.0,
            seed=s.seed,
            max_tokens=workload.gen_len,
        ),
    )


def _sink(sample: Sample, token: Callable[[], None]):
    def sink(event: HostEvent) -> None:
        """Host thread: note the times; the stats come with the last chunk."""
        now = time.perf_counter()
        if isinstance(event, ChunkEvent):
            chunk = event.chunk
            if chunk.token is not None or chunk.text:
                if sample.first_token is None:
                    sample.first_token = now
                sample.last_token = now
                token()
            stats = chunk.stats
            if chunk.finish_reason is not None and stats is not None:
                sample.prompt_tokens = stats.prompt_tokens
                sample.cached_tokens = max(0, stats.prompt_tokens - stats.prompt_tokens_evaluated)
                sample.output_tokens = stats.generated_tokens
                sample.engine_ttft_s = stats.time_to_first_token_s or None
                sample.prefill_tok_s = stats.prompt_tok_s or None
                sample.decode_tok_s = stats.decode_tok_s or None
                sample.peak_memory_bytes = stats.peak_memory_bytes or None
                if chunk.finish_reason == "error":
                    sample.error = chunk.error or "generation failed"
                elif chunk.finish_reason == "cancelled":
                    sample.error = "cancelled"
        elif isinstance(event, JobDone):
            sample.finished = now
        elif isinstance(event, JobFailed):
            sample.finished = now
            sample.error = event.error_message

    return sink


def _probe() -> HardwareProfile:
    from app.core.hardware import probe_hardware
    from app.core.paths import app_paths

    return probe_hardware(cache_dir=app_paths().cache, measure_bandwidth=False)
