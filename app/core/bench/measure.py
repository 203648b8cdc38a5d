"""One request's timings as a client saw them (and as the engine reported them, where it did), and how a
cell's requests become its row of the report."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.bench.report import CellResult, Comparison, Prediction
from app.core.bench.stats import median, summarize


@dataclass
class Sample:
    """Times are time.perf_counter() seconds on the measuring thread's clock."""

    submitted: float
    first_token: float | None = None  # the first token with text arrived
    last_token: float | None = None
    finished: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # reused from the engine's cache (None: not reported)
    output_tokens: int = 0  # the engine's count, else the content deltas counted
    engine_ttft_s: float | None = None  # the engine's own time to first token (no queueing)
    prefill_tok_s: float | None = None  # the engine's (or server's `timings`) prompt rate
    decode_tok_s: float | None = None  # the engine's rate, else from the arrival times
    peak_memory_bytes: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.finished is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.submitted

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.submitted

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.first_token is None or self.last_token is None or self.output_tokens < 2:
            return None
        span = self.last_token - self.first_token
        return span / (self.output_tokens - 1) if span > 0 else None

    @property
    def client_decode_tok_s(self) -> float | None:
        tpot = self.tpot_s
        return 1.0 / tpot if tpot else None

    @property
    def queue_wait_s(self) -> float | None:
        if self.ttft_s is None or self.engine_ttft_s is None:
            return None
        return max(0.0, self.ttft_s - self.engine_ttft_s)


def cell_result(
    prompt_len: int,
    concurrency: int,
    samples: list[Sample],
    wall_s: float,
    prediction: Prediction | None = None,
) -> CellResult:
    ok = [s for s in samples if s.ok]
    out_tokens = sum(s.output_tokens for s in ok)
    prefill = median(s.prefill_tok_s for s in ok)
    decode = median((s.decode_tok_s or s.client_decode_tok_s) for s in ok)
    peaks = [s.peak_memory_bytes for s in ok if s.peak_memory_bytes]
    cached = [s.cached_tokens for s in ok if s.cached_tokens is not None]
    pred = prediction or Prediction()
    return CellResult(
        prompt_len=prompt_len,
        concurrency=concurrency,
        requests=len(samples),
        completed=len(ok),
        errors=sorted({s.error for s in samples if s.error})[:5],
        prompt_tokens=_mean(s.prompt_tokens for s in ok),
        cached_tokens=_mean(cached),
        output_tokens=_mean(s.output_tokens for s in ok),
        ttft_s=summarize(s.ttft_s for s in ok),
        tpot_s=summarize(s.tpot_s for s in ok),
        e2e_s=summarize(s.e2e_s for s in ok),
        queue_wait_s=summarize(s.queue_wait_s for s in ok),
        prefill_tok_s=prefill,
        decode_tok_s=decode,
        requests_per_s=len(ok) / wall_s if wall_s > 0 and ok else None,
        aggregate_tok_s=out_tokens / wall_s if wall_s > 0 and out_tokens else None,
        peak_memory_bytes=max(peaks) if peaks else None,
        wall_s=wall_s,
        predicted=pred,
        measured_vs_predicted=Comparison(
            decode=_ratio(decode, pred.decode_tok_s),
            prefill=_ratio(prefill, pred.prefill_tok_s),
            memory=_ratio(max(peaks) if peaks else None, pred.memory_bytes),
        ),
    )


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if not measured or not predicted:
        return None
    return measured / predicted
