"""What the Benchmark page plots and tabulates, taken from reports: plain data, no Qt, so the numbers on
the charts are tested apart from the drawing."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.bench import compare
from app.core.bench.report import BenchReport, CellResult
from app.core.units import fmt_bytes

Point = tuple[float, float]


@dataclass(frozen=True)
class SpeedSeries:
    """One run's measured and predicted tok/s against prompt length (its least concurrent cells)."""

    label: str
    measured: list[Point]
    predicted: list[Point]


@dataclass(frozen=True)
class TtftBars:
    """TTFT in milliseconds per prompt length, p50 / p95 / p99, for one run."""

    label: str
    categories: list[str]
    p50: list[float]
    p95: list[float]
    p99: list[float]


def run_label(report: BenchReport) -> str:
    """How a run is named in legends and lists: model, quant, engine and when."""
    quant = _quant(report)
    when = report.created_at.replace("T", " ")[:16]
    return f"{report.model.name}{quant} · {report.engine.name} · {when}"


def _quant(report: BenchReport) -> str:
    """The quant after a model's name (" Q4_K_M"), unless the name (a library's, from the file) says it."""
    quant = report.weights.quant_type
    return f" {quant}" if quant and quant.lower() not in report.model.name.lower() else ""


def legend_labels(reports: list[BenchReport]) -> list[str]:
    """Short names for a legend (model and quant); the engine and time are added only where two runs
    would otherwise read the same (to the second, then numbered), and a partial run says so."""
    short = [f"{r.model.name}{_quant(r)}" for r in reports]
    labels = [run_label(r) if short.count(s) > 1 else s for r, s in zip(reports, short)]
    labels = [f"{lb}:{r.created_at[17:19]}" if labels.count(lb) > 1 else lb for r, lb in zip(reports, labels)]
    labels = [f"{lb} #{i + 1}" if labels.count(lb) > 1 else lb for i, lb in enumerate(labels)]
    return [f"{lb} (partial)" if r.partial else lb for r, lb in zip(reports, labels)]


def single_user_cells(report: BenchReport) -> list[CellResult]:
    """Per prompt length, the cell with the fewest concurrent users: speeds without queueing."""
    best: dict[int, CellResult] = {}
    for cell in report.cells:
        seen = best.get(cell.prompt_len)
        if seen is None or cell.concurrency < seen.concurrency:
            best[cell.prompt_len] = cell
    return [best[n] for n in sorted(best)]


def speed_series(report: BenchReport, which: str, label: str | None = None) -> SpeedSeries:
    """`which` is "decode" or "prefill"; `label` names it in a legend (the run's full label by default).
    The points are the bench core's series at the lowest concurrency (speeds without queueing)."""
    if which not in ("decode", "prefill"):
        raise ValueError(f"no {which!r} speed; decode or prefill")
    metric = f"{which}_tok_s"
    measured = [(float(x), y) for x, y in compare.series(report, metric) if y > 0]
    predicted = [(float(x), y) for x, y in compare.series(report, metric, predicted=True) if y > 0]
    return SpeedSeries(label or run_label(report), measured, predicted)


def ttft_bars(report: BenchReport, label: str | None = None) -> TtftBars:
    cells = [c for c in single_user_cells(report) if c.ttft_s is not None]
    return TtftBars(
        label or run_label(report),
        [f"{c.prompt_len:,}" for c in cells],
        [c.ttft_s.p50 * 1000 for c in cells if c.ttft_s],
        [c.ttft_s.p95 * 1000 for c in cells if c.ttft_s],
        [c.ttft_s.p99 * 1000 for c in cells if c.ttft_s],
    )


TABLE_COLUMNS = [
    "Prompt",
    "Users",
    "TTFT p50 / p95 / p99 (ms)",
    "Per token (ms)",
    "End to end (s)",
    "Prefill tok/s (predicted)",
    "Decode tok/s (predicted)",
    "Requests/s",
]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if seconds < 0.1 else f"{seconds * 1000:.0f}"


def _rate(measured: float | None, predicted: float | None) -> str:
    def one(v: float) -> str:
        return f"{v:.1f}" if v < 100 else f"{v:,.0f}"

    text = "—" if not measured else one(measured)
    return f"{text} ({one(predicted)})" if predicted else text


def table_rows(report: BenchReport) -> list[list[str]]:
    """One row per (prompt length, users), the way `hearth bench` prints them."""
    rows = []
    for c in sorted(report.cells, key=lambda c: (c.prompt_len, c.concurrency)):
        t = c.ttft_s
        rows.append(
            [
                f"{c.prompt_len:,}",
                str(c.concurrency),
                f"{_ms(t.p50)} / {_ms(t.p95)} / {_ms(t.p99)}" if t else "—",
                _ms(c.tpot_s.p50) if c.tpot_s else "—",
                f"{c.e2e_s.p50:.2f}" if c.e2e_s else "—",
                _rate(c.prefill_tok_s, c.predicted.prefill_tok_s),
                _rate(c.decode_tok_s, c.predicted.decode_tok_s),
                f"{c.requests_per_s:.2f}" if c.requests_per_s else "—",
            ]
        )
    return rows


def describe_run(report: BenchReport) -> str:
    """What makes the numbers meaningful, in two lines: weights, engine flags, machine, workload."""
    w, e, f = report.weights, report.engine, report.engine.flags
    size = fmt_bytes(w.file_size) if w.file_size else None
    weights = " ".join(p for p in (report.model.name, w.format and w.format.upper(), w.quant_type, size) if p)
    flags = [
        f"ctx {f.n_ctx:,}" if f.n_ctx else "",
        f"GPU layers {'all' if f.gpu_layers == -1 else f.gpu_layers}" if f.gpu_layers is not None else "",
        f"{f.threads} threads" if f.threads else "",
        "flash attention" if f.flash_attention else "",
        f"KV {f.kv_type_k}" if f.kv_type_k else "",
    ]
    engine = " · ".join(p for p in [f"{e.name} {e.version or ''}".strip(), *flags] if p)
    hw = report.hardware
    cpu = (hw.get("cpu") or {}).get("brand") or ""
    wl = report.workload
    workload = (
        f"prompts {', '.join(f'{n:,}' for n in wl.prompt_lens)} · {wl.gen_len} generated · "
        f"users {', '.join(map(str, wl.concurrency))} · {report.runs} runs, {report.warmup_requests} warm-up"
    )
    peak = report.memory.peak_bytes
    memory = f" · peak memory {fmt_bytes(peak)}" if peak else ""
    machine = f" · {cpu}" if cpu else ""
    return f"{weights} · {engine}{machine}\n{workload}{memory}"


def prefix_summary(report: BenchReport) -> str:
    """The cached shared prefix's benefit, in a sentence ("" when the workload had none)."""
    parts = []
    for r in report.shared_prefix:
        if r.ttft_cold_s and r.ttft_warm_s:
            speedup = f" ({r.speedup:.1f}× faster)" if r.speedup else ""
            parts.append(
                f"{r.prefix_tokens:,} of {r.prompt_len:,} tokens shared: first token in "
                f"{_ms(r.ttft_warm_s.p50)} ms cached vs {_ms(r.ttft_cold_s.p50)} ms cold{speedup}"
            )
    return "; ".join(parts)
