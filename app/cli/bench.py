"""`hearth bench MODEL` and `hearth bench --endpoint URL`: a workload measured per prompt length and
concurrency (TTFT, time per output token, end-to-end latency as p50/p95/p99; prefill and decode tok/s
apart) with the planner's prediction beside it; the report is saved as JSON in the data folder.

Progress goes to stderr (on a terminal), the table to stdout. Ctrl-C cancels: nothing is saved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.formats import GGUF

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.bench.driver import Driver, Progress
    from app.core.bench.report import BenchReport
    from app.core.bench.workload import Workload

EXIT_INTERRUPTED = 130


def add_bench_command(subparsers: Any) -> None:
    """Add `bench`; its parser's `handler` is the function to call with (ctx, args)."""
    from app.core.bench.workload import PRESETS

    p = subparsers.add_parser(
        "bench",
        help="measure a model (or any OpenAI-compatible server): TTFT, prefill and decode, against the prediction",
        description="Measure a model through Hearth's engine, or a server with --endpoint. Saves a JSON report.",
    )
    p.add_argument("model", nargs="?", help="a GGUF file, an MLX folder or a library name (with --endpoint: its id)")
    p.add_argument("--preset", metavar="NAME", help=f"a workload preset: {', '.join(repr(n) for n in PRESETS)}")
    p.add_argument("--prompt-lens", metavar="LIST", help="prompt lengths in tokens, e.g. 128,512,2048")
    p.add_argument("--gen-len", type=int, metavar="N", help="tokens to generate per request (default 128)")
    p.add_argument("--concurrency", metavar="LIST", help="requests at once, e.g. 1,4 (default 1)")
    p.add_argument("--runs", type=int, metavar="N", help="measured runs per cell (default 3)")
    p.add_argument("--warmup", type=int, metavar="N", help="unmeasured requests per prompt length (default 1)")
    p.add_argument("--ctx", type=int, metavar="N", help="context to load with (default: what the longest prompt needs)")
    p.add_argument("--shared-prefix", type=int, metavar="N", help="tokens of a shared system prompt: cold vs cached")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: physical cores)")
    p.add_argument("--gpu-layers", type=int, metavar="N", help="layers on the GPU (default: the planner's; -1: all)")
    p.add_argument("--json", metavar="OUT", help="also write the report to OUT ('-': print it instead of the table)")
    p.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080")
    p.add_argument("--api-key", metavar="KEY", help="the endpoint's API key")
    p.add_argument("--model", dest="model_id", metavar="ID", help="the endpoint's model id (default: its only one)")
    p.set_defaults(handler=cmd_bench)


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The preset (or the defaults) with the flags given on top; ValueError with a clear message."""
    from pydantic import ValidationError

    from app.core.bench.workload import Workload, parse_int_list, preset

    base = Workload()
    if args.preset:
        try:
            base = preset(args.preset)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
    changes: dict[str, Any] = {}
    if args.prompt_lens is not None:
        changes["prompt_lens"] = parse_int_list(args.prompt_lens, "--prompt-lens")
    if args.concurrency is not None:
        changes["concurrency"] = parse_int_list(args.concurrency, "--concurrency")
    for flag in ("gen_len", "runs", "warmup", "ctx", "shared_prefix"):
        if getattr(args, flag) is not None:
            changes[flag] = getattr(args, flag)
    try:
        return Workload.model_validate({**base.model_dump(), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "--" + str(err["loc"][0]).replace("_", "-") if err.get("loc") else "the workload"
        raise ValueError(f"{where}: {err['msg'].removeprefix('Value error, ')}") from None


def cmd_bench(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.bench.driver import BenchCancelled
    from app.core.bench.store import BenchStore
    from app.core.errors import HearthError

    try:
        workload = workload_from_args(args)
    except ValueError as exc:
        return ctx.fail(exc, 2)
    if not args.endpoint and not args.model:
        return ctx.fail("name a model (a file, a folder or a library name), or give --endpoint URL", 2)
    progress = _progress_line if sys.stderr.isatty() else None
    host = None
    try:
        if args.endpoint:
            runner: Driver = _endpoint_runner(args, workload, progress)
        else:
            runner, host = _host_runner(ctx, args, workload, progress)
        report = runner.run()
    except (KeyboardInterrupt, BenchCancelled):
        _clear_progress(progress)
        return ctx.fail("cancelled; no report was saved", EXIT_INTERRUPTED)
    except HearthError as exc:
        _clear_progress(progress)
        return ctx.fail(exc)
    finally:
        if host is not None:
            host.shutdown(10)
    _clear_progress(progress)
    path = BenchStore.for_paths(ctx.paths).save(report)
    if args.json and args.json != "-":
        try:
            BenchStore(Path(args.json).parent).save(report, Path(args.json))
        except OSError as exc:
            return ctx.fail(f"the report is saved at {path}, but {args.json} could not be written: {exc}")
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        sys.stdout.write(format_report(report) + "\n")
    sys.stderr.write(f"report saved: {path}\n")
    return 0


def _host_runner(ctx: CliContext, args: argparse.Namespace, workload: Workload, progress):
    from app.cli.model_load import resolve_model
    from app.core.bench.describe import planned_load
    from app.core.bench.runner import HostRunner
    from app.core.engines import default_registry
    from app.core.engines.llamacpp.options import default_threads
    from app.core.hardware import probe_hardware
    from app.core.runtime.engine_host import EngineHost

    path, fmt = resolve_model(ctx, args.model)
    threads = args.threads
    if threads is None and fmt == GGUF:
        threads = default_threads()
    # The planner predicts the load a chat gets (all physical cores, its own GPU layers): a run with other
    # settings would teach it the wrong lesson.
    custom = args.gpu_layers is not None or (args.threads is not None and args.threads != default_threads())
    if custom:
        sys.stderr.write("note: with --threads or --gpu-layers set, the speeds are not fed to calibration\n")
    load = planned_load(path, fmt, workload.target_ctx, n_threads=threads, n_gpu_layers=args.gpu_layers)
    # No calibration on the host: the runner records one measured speed per prompt length instead of one
    # per request (warm-up included).
    host = EngineHost(default_registry(), queue_size=max(8, max(workload.concurrency) + 1), name="hearth-engine")
    runner = HostRunner(
        host,
        load,
        fmt,
        workload,
        calibration=ctx.calibration,
        feed_calibration=not custom,
        hardware=probe_hardware(cache_dir=ctx.paths.cache, measure_bandwidth=False),
        sha256=_known_sha256(ctx, args.model, path),
        model_name=None if Path(args.model).expanduser().exists() else args.model,
        progress=progress,
    )
    return runner, host


def _endpoint_runner(args: argparse.Namespace, workload: Workload, progress):
    from app.core.bench.endpoint import EndpointRunner

    return EndpointRunner(
        args.endpoint, workload, api_key=args.api_key, model=args.model_id or args.model, progress=progress
    )


def _known_sha256(ctx: CliContext, name: str, path: Path) -> str | None:
    """The library's digest of the model's (first) file, so a large model is not hashed again."""
    try:
        library = ctx.open_library()
    except Exception:
        return None
    try:
        model = library.find(name) or library.find(str(path))
        if model is None:
            return None
        return next((f.sha256 for f in model.files if Path(f.path) == path and f.sha256), None)
    finally:
        library.close()


def _progress_line(p: Progress) -> None:
    sys.stderr.write(f"\r\033[K[{p.done}/{p.total}] {p.phase}")
    sys.stderr.flush()


def _clear_progress(progress) -> None:
    if progress is not None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def _rate(measured: float | None, predicted: float | None) -> str:
    m = "—" if measured is None else f"{measured:.1f}" if measured < 1000 else f"{measured:.0f}"
    if predicted is None:
        return m
    p = f"{predicted:.1f}" if predicted < 1000 else f"{predicted:.0f}"
    return f"{m} ({p})"


def format_report(report: BenchReport) -> str:
    """The report as a table a person reads: one row per (prompt length, users)."""
    from app.core.units import fmt_bytes

    e = report.engine
    head = f"{report.model.name} on {e.name}" + (f" {e.version}" if e.version else "")
    head += f" at {e.url}" if e.url else ""
    f = e.flags
    flags = ", ".join(
        part
        for part in (
            f"ctx {f.n_ctx}" if f.n_ctx else "",
            f"GPU layers {f.gpu_layers}" if f.gpu_layers is not None else "",
            f"threads {f.threads}" if f.threads else "",
            f"KV {f.kv_type_k}" if f.kv_type_k else "",
            "flash attention" if f.flash_attention else "",
        )
        if part
    )
    w = report.workload
    lines = [
        head + (f" ({flags})" if flags else ""),
        f"{w.gen_len} tokens per reply, {report.runs} runs per cell, {report.warmup_requests} warm-up"
        + (f", preset {w.preset!r}" if w.preset else ""),
        "",
        f"{'prompt':>7} {'users':>5}  {'TTFT p50/p95/p99 ms':<22} {'TPOT ms':>8} {'e2e p50 s':>9}  "
        f"{'prefill tok/s (pred)':<22} {'decode tok/s (pred)':<20} {'req/s':>6}",
    ]
    for c in report.cells:
        ttft = "/".join(_ms(getattr(c.ttft_s, k)) for k in ("p50", "p95", "p99")) if c.ttft_s else "—"
        tpot = _ms(c.tpot_s.p50) if c.tpot_s else "—"
        e2e = f"{c.e2e_s.p50:.2f}" if c.e2e_s else "—"
        rps = f"{c.requests_per_s:.2f}" if c.requests_per_s else "—"
        lines.append(
            f"{c.prompt_len:>7} {c.concurrency:>5}  {ttft:<22} {tpot:>8} {e2e:>9}  "
            f"{_rate(c.prefill_tok_s, c.predicted.prefill_tok_s):<22} "
            f"{_rate(c.decode_tok_s, c.predicted.decode_tok_s):<20} {rps:>6}"
            + (f"  {c.requests - c.completed} failed: {c.errors[0]}" if c.completed < c.requests and c.errors else "")
        )
    for s in report.shared_prefix:
        cold = _ms(s.ttft_cold_s.p50) if s.ttft_cold_s else "—"
        warm = _ms(s.ttft_warm_s.p50) if s.ttft_warm_s else "—"
        gain = f", {s.speedup:.1f}× faster" if s.speedup else ""
        cached = f" ({s.cached_tokens:.0f} tokens cached)" if s.cached_tokens is not None else ""
        lines.append(
            f"shared prefix of {s.prefix_tokens} tokens in {s.prompt_len}: TTFT {cold} ms cold, {warm} ms warm"
            f"{cached}{gain}"
        )
    m = report.memory
    parts = []
    if m.peak_bytes:
        parts.append(f"peak {fmt_bytes(m.peak_bytes)}")
    if m.predicted_bytes:
        parts.append(f"predicted {fmt_bytes(m.predicted_bytes)}")
    if m.headroom_bytes is not None:
        parts.append(f"headroom {fmt_bytes(m.headroom_bytes)} ({m.headroom_device})")
    if parts:
        lines.append(f"memory at ctx {m.target_ctx}: " + ", ".join(parts))
    if any(c.predicted.decode_tok_s for c in report.cells):
        lines.append("(pred): the planner's prediction for this machine")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
