"""Run every bench in bench/ and print one table: each ratio beside its target, and whether it is met.

    .venv/bin/python bench/run_all.py [--quick] [--only engine,download] [--list]
    make bench [QUICK=1]

Each bench runs as its own process (a crash or a hang in one is a "not run" row, not the end of the run),
writes its figures as JSON ({metric: {value, target, op}}) and its log to bench/out/run_all/<bench>.log. The
table and every figure are also written to bench/out/run_all.json. `--quick` passes each bench its short
arguments (fewer runs, smaller files, no generated 1B model) and keeps the whole run within 10 minutes.
Benches that need llama-server are given the folder bench/build_peers.sh built (`--bin`); this never builds it
(about 10 minutes): without it a bench that has figures of its own runs with `--no-peer`, the others say so.
The flags given to every bench (`--json`, `--bin`, `--no-peer`) are defined once, in bench/bench_args.py, and
tests/bench/test_run_all.py parses each command line below with the bench's own parser.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_args import BIN, JSON, NO_PEER, built_peer_dir  # noqa: E402

BENCH_DIR = ROOT / "bench"
OUT = BENCH_DIR / "out"
QUICK_BUDGET_S = 570  # `make bench QUICK=1` finishes in under 10 minutes, the table included

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "abs<=": lambda value, target: abs(value) <= target,
}


@dataclass(frozen=True)
class Metric:
    """One figure a bench measured; `target` and `op` None: reported, with no target to meet."""

    name: str
    value: float | None
    target: float | None = None
    op: str | None = None
    unit: str = ""
    compares: str = ""
    note: str = ""  # why there is no value
    display: str = ""  # the measured text when a number alone would mislead ("3/4 cases")
    target_display: str = ""

    def met(self) -> bool | None:
        if self.value is None or self.target is None or self.op not in OPS:
            return None
        return OPS[self.op](self.value, self.target)


@dataclass
class BenchResult:
    bench: str
    compares: str
    metrics: list[Metric] = field(default_factory=list)
    seconds: float = 0.0
    not_run: str = ""  # the reason, when the bench did not run or gave no figures
    notes: list[str] = field(default_factory=list)  # what ran differently (a peer missing)


def fmt_number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def with_unit(text: str, unit: str) -> str:
    return f"{text} {unit}" if unit else text


def measured_text(m: Metric) -> str:
    if m.display:
        return m.display
    if m.value is None:
        return "—"
    return with_unit(fmt_number(m.value), m.unit)


def target_text(m: Metric) -> str:
    if m.target_display:
        return m.target_display
    if m.target is None or m.op is None:
        return "—"
    if m.op == "abs<=":
        return with_unit(f"within ±{m.target:g}", m.unit)
    return with_unit(f"{m.op} {m.target:g}", m.unit)


def met_text(m: Metric) -> str:
    if m.value is None:
        return f"not run: {m.note or 'no figure'}"
    met = m.met()
    return "—" if met is None else ("yes" if met else "NO")


def table_rows(results: list[BenchResult]) -> list[tuple[str, str, str, str, str, str]]:
    """(bench, metric, what it compares, measured, target, met) for every figure; one row per bench not run."""
    rows = []
    for r in results:
        if r.not_run:
            rows.append((r.bench, "—", r.compares, "—", "—", f"not run: {r.not_run}"))
            continue
        for m in r.metrics:
            rows.append((r.bench, m.name, m.compares or r.compares, measured_text(m), target_text(m), met_text(m)))
        rows.extend((r.bench, "note", note, "—", "—", "—") for note in r.notes)
    return rows


def format_table(results: list[BenchResult]) -> str:
    """A Markdown table (it pastes into the README as is), columns padded to line up in a terminal."""
    head = ("bench", "metric", "compares", "measured", "target", "met")
    rows = [head, *(tuple(cell.replace("|", "\\|") for cell in row) for row in table_rows(results))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def summary_line(results: list[BenchResult], seconds: float) -> str:
    verdicts = [m.met() for r in results for m in r.metrics]
    met = sum(v is True for v in verdicts)
    targets = sum(v is not None for v in verdicts)
    not_run = [r.bench for r in results if r.not_run]
    text = f"{met} of {targets} targets met"
    if not_run:
        text += f"; not run: {', '.join(not_run)}"
    return text + f"; {seconds / 60:.1f} min in all"


def metrics_from_json(data: Any) -> list[Metric]:
    """{metric: {value, target, op, unit?, compares?, note?}}, at the top level or under "metrics"."""
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        data = data["metrics"]
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object of metrics")
    out = []
    for name, entry in data.items():
        if not isinstance(entry, dict) or "value" not in entry:
            continue
        value = entry["value"]
        target = entry.get("target")
        op = entry.get("op")
        note = str(entry.get("note") or "")
        if op is not None and op not in OPS:
            note, op, target = f"unknown op {op!r}", None, None
        out.append(
            Metric(
                name=str(name),
                value=None if value is None else float(value),
                target=None if target is None else float(target),
                op=op,
                unit=str(entry.get("unit") or ""),
                compares=str(entry.get("compares") or ""),
                note=note,
            )
        )
    return out


def fit_accuracy_metrics(data: Any) -> list[Metric]:
    """From fit_accuracy.py's --out file (its rows, as it writes them): the same verdicts its table prints."""
    rows = data["rows"]
    if not rows:
        raise ValueError("no cases ran")
    n = len(rows)
    within = sum(abs(r["buffer_err_pct"]) <= 5 or abs(r["buffer_err_mib"]) <= 100 for r in rows)
    cal = [abs(r["decode_err_cal_pct"]) for r in rows]
    unc = [abs(r["decode_err_uncal_pct"]) for r in rows]
    return [
        Metric(
            "memory",
            within / n,
            1.0,
            ">=",
            compares="predicted llama.cpp buffers vs llama.cpp's own report: cases within 5 % or 100 MiB",
            display=f"{within}/{n} cases",
            target_display="every case",
        ),
        Metric(
            "decode, calibrated (worst)",
            max(cal),
            15.0,
            "<=",
            "%",
            compares="error of predicted decode tok/s vs measured, leave-one-out calibrated, worst case",
        ),
        Metric(
            "decode, calibrated (median)",
            statistics.median(cal),
            15.0,
            "<=",
            "%",
            compares="the same, median over the cases",
        ),
        Metric(
            "decode, uncalibrated (median)",
            statistics.median(unc),
            15.0,
            "<=",
            "%",
            compares="error of predicted decode tok/s vs measured, before calibration (this CPU's measured "
            "per-type rates when the quant probe has run), median",
        ),
        *(
            [
                Metric(
                    "decode, calibrated per size (median)",
                    statistics.median(abs(r["decode_err_size_cal_pct"]) for r in rows),
                    compares="the same, each case corrected by the app's per-size calibration over the others",
                    unit="%",
                )
            ]
            if all("decode_err_size_cal_pct" in r for r in rows)
            else []
        ),
    ]


SCOREBOARD_TARGET = re.compile(r"(decode median|max|prefill median) ([\d.]+) % \(≤ ([\d.]+)\)")
SCOREBOARD_NAMES = {
    "decode median": "held-out decode, median",
    "max": "held-out decode, worst row",
    "prefill median": "held-out prefill, median",
}


def speed_scoreboard_metrics(log: str) -> list[Metric]:
    """speed_scoreboard.py writes no JSON: its closing line says each figure and its target, e.g.
    "targets on held-out rows: decode median 4.5 % (≤ 10), max 78.9 % (≤ 25); prefill median 10.2 % (≤ 30)"."""
    lines = [ln for ln in log.splitlines() if ln.startswith("targets on held-out rows:")]
    if not lines:
        raise ValueError("no 'targets on held-out rows' line in its output")
    found = SCOREBOARD_TARGET.findall(lines[-1])
    if not found:
        raise ValueError(f"cannot read {lines[-1]!r}")
    return [
        Metric(
            SCOREBOARD_NAMES[label],
            float(value),
            float(target),
            "<=",
            "%",
            compares="error of predicted vs published llama.cpp tok/s, on GPUs and Macs not fitted on",
        )
        for label, value, target in found
    ]


@dataclass(frozen=True)
class Bench:
    """One bench and the arguments it is given. Every flag here must be one the script's build_parser() takes
    (tests/bench/test_run_all.py checks it for every bench in BENCHES)."""

    name: str
    script: str
    compares: str
    quick: tuple[str, ...] = ()
    full: tuple[str, ...] = ()
    # "required": every figure is against llama-server (given `--bin`; not run without it); "optional": given
    # `--bin`, or `--no-peer` when llama-server is not built. The bench adds both with bench_args.add_peers.
    peer: str = ""
    optional: bool = False  # no row when the script does not exist (yet)
    out_flag: str | None = JSON  # where it writes its figures; None: read them from its log (log_reader)
    reader: Callable[[Any], list[Metric]] = metrics_from_json
    log_reader: Callable[[str], list[Metric]] | None = None  # for a bench that only prints its figures
    quick_timeout_s: int = 240
    full_timeout_s: int = 3600


# The quick ones first: under --quick's budget a busy machine loses only the slowest, run last (engine).
BENCHES = [
    Bench(
        "download",
        "download.py",
        "our downloader vs curl on loopback; bytes re-fetched after a drop",
        quick=("--size-mb", "256", "--reps", "2", "--no-hf"),
        quick_timeout_s=90,
    ),
    Bench(
        "ui_latency",
        "ui_latency.py",
        "Qt event-loop stalls (also beside 2 CPU-bound processes), chat open and scroll, memory, start and quit",
        quick=(
            "--seconds",
            "5",
            "--real-seconds",
            "5",
            "--long-seconds",
            "3",
            "--lifecycle-runs",
            "3",
            "--busy",
            "2",
            "--screenshot",
            str(OUT / "ui_latency.png"),
        ),
        full=("--busy", "2", "--screenshot", str(OUT / "ui_latency.png")),
        quick_timeout_s=180,
    ),
    Bench(
        "fit_accuracy",
        "fit_accuracy.py",
        "predicted memory and decode speed vs real llama.cpp loads",
        quick=("--quick", "--no-1b"),
        out_flag="--out",
        reader=fit_accuracy_metrics,
        quick_timeout_s=180,
    ),
    Bench(
        "speed_scoreboard",
        "speed_scoreboard.py",
        "the speed model's predictions vs public llama.cpp figures (GPUs, Macs)",
        out_flag=None,
        log_reader=speed_scoreboard_metrics,
        quick_timeout_s=180,
    ),
    Bench(
        "endpoint",
        "endpoint.py",
        "the local API vs the engine host directly, and vs llama-server",
        quick=("--runs", "2", "--clients", "4"),
        peer="optional",
        quick_timeout_s=180,
    ),
    Bench(
        "busy",
        "busy.py",
        "decode and prefill with CPU-bound processes beside the engine: vs quiet, fixed threads, llama-server",
        quick=("--runs", "2", "--loads", "0,2"),
        peer="optional",
        quick_timeout_s=240,
    ),
    Bench(
        "concurrency",
        "concurrency.py",
        "4 streaming clients on the slots hearth serve plans vs llama-server -np 4; vs one after another",
        peer="optional",
        quick_timeout_s=180,
    ),
    Bench(
        "concurrency_8",
        "concurrency.py",
        "8 streaming clients on the slots hearth serve plans: TTFT p95 vs one client's, vs llama-server -np 8",
        quick=("--clients", "8", "--rounds", "1"),
        full=("--clients", "8"),
        peer="optional",
        quick_timeout_s=180,
    ),
    Bench(
        "vision",
        "vision.py",
        "a second question about the same image (image from the cache) and the image encoder vs llama-mtmd-cli",
        quick=("--runs", "2"),
        peer="optional",
        quick_timeout_s=180,
    ),
    Bench(
        "residency",
        "residency.py",
        "two clients alternating on two resident models vs a single-model pool, and vs swapping (a cap of one)",
        quick=("--requests", "3", "--tokens", "16"),
        quick_timeout_s=300,
    ),
    Bench(
        "documents",
        "documents.py",
        "indexing notes and PDFs (÷ the engine alone, ÷ /v1/embeddings), one changed file, search at 10k/100k",
        quick=("--files", "300", "--pdf-pages", "100", "--passages", "10000,100000", "--queries", "20"),
        quick_timeout_s=180,
    ),
    Bench(
        "agent_turns",
        "agent_turns.py",
        "two agents alternating turns on a shared 6 k-token prompt: TTFT vs llama-server's slot cache",
        quick=("--turns", "4"),
        peer="required",
        quick_timeout_s=240,
    ),
    Bench(
        "engine",
        "engine.py",
        "Hearth's in-process llama.cpp vs llama-server (same GGUF, threads, context)",
        quick=("--runs", "2", "--no-1b"),
        peer="required",
        quick_timeout_s=360,  # the slowest under --quick (a cold 2,000-token prompt, llama-bench): what is left
    ),
]

# The benches in bench/ that `make bench` does not run, and why; and the scripts that are not benches.
# tests/bench/test_bench_args.py checks that every script in bench/ is in BENCHES or in one of these.
BY_HAND = {
    "speculative.py": "by hand (docs/bench.md): it prints its figures and writes none for this runner",
    "mlx_batch.py": "by hand (docs/bench.md): the MLX engine's batched path, for Apple Silicon",
}
NOT_BENCHES = {"run_all.py", "bench_args.py", "app_lifecycle.py"}  # app_lifecycle: a part of ui_latency.py


def peer_bin_dir() -> Path | None:
    """llama-server and llama-bench as bench/build_peers.sh leaves them (or $LLAMA_BIN); None if not built."""
    return built_peer_dir()


def command_for(
    bench: Bench, quick: bool, out_json: Path, peers: Path | None
) -> tuple[list[str] | None, str, list[str]]:
    """(arguments, reason it cannot run, notes) for one bench; arguments None when it cannot run."""
    script = BENCH_DIR / bench.script
    notes: list[str] = []
    if not script.is_file():
        return None, f"{bench.script} not found", notes
    args = list(bench.quick if quick else bench.full)
    if bench.peer:
        if peers is not None:
            args += [BIN, str(peers)]
        elif bench.peer == "required":
            return None, "llama-server not built (run `bash bench/build_peers.sh`, ~10 min)", notes
        else:
            args.append(NO_PEER)
            notes.append("llama-server not built: the rows against it are missing")
    if bench.out_flag:
        args += [bench.out_flag, str(out_json)]
    return [sys.executable, str(script), *args], "", notes


def last_line(log: Path, limit: int = 160) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    text = lines[-1] if lines else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def stop_group(proc: subprocess.Popen) -> None:
    """End the bench and what it started (llama-server, client processes): its own process group, by id."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bench(
    bench: Bench,
    quick: bool,
    out_dir: Path,
    timeout_s: float,
    peers: Path | None,
) -> BenchResult:
    result = BenchResult(bench.name, bench.compares)
    out_json = out_dir / f"{bench.name}.json"
    log = out_dir / f"{bench.name}.log"
    out_json.unlink(missing_ok=True)
    cmd, reason, notes = command_for(bench, quick, out_json, peers)
    if cmd is None:
        result.not_run = reason
        return result
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
    env.setdefault("HEARTH_HOME", str(out_dir / "home"))  # benches never write into the user's Hearth data
    t0 = time.monotonic()
    with log.open("w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            code = None
    result.seconds = time.monotonic() - t0
    if code is None:
        shown = log.relative_to(ROOT) if log.is_relative_to(ROOT) else log
        result.not_run = f"timed out after {timeout_s:.0f} s (log: {shown})"
        return result
    if code != 0:
        result.not_run = f"exit {code}: {last_line(log)}"
        return result
    try:
        if out_json.is_file():
            result.metrics = bench.reader(json.loads(out_json.read_text(encoding="utf-8")))
        elif bench.log_reader is not None:
            result.metrics = bench.log_reader(log.read_text(encoding="utf-8", errors="replace"))
        else:
            where = f"no {bench.out_flag} file" if bench.out_flag else "nothing to read them from"
            result.not_run = f"ran, but wrote no figures ({where})"
            return result
    except (ValueError, KeyError, TypeError) as exc:
        result.not_run = f"figures unreadable: {exc!r}"
        return result
    result.notes = notes
    return result


def selected(names: str | None) -> list[Bench]:
    if not names:
        return BENCHES
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {b.name: b for b in BENCHES}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown bench {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in wanted]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs, the whole within 10 minutes")
    ap.add_argument("--only", help="comma-separated bench names (see --list)")
    ap.add_argument("--list", action="store_true", help="list the benches and exit")
    ap.add_argument("--out", type=Path, default=OUT / "run_all", help="logs and per-bench JSON (bench/out/run_all)")
    args = ap.parse_args(argv)
    if args.list:
        for b in BENCHES:
            sys.stdout.write(f"{b.name:<18} {b.script:<22} {b.compares}\n")
        for script, why in BY_HAND.items():
            sys.stdout.write(f"{'(not run)':<18} {script:<22} {why}\n")
        return 0
    # An optional bench that does not exist (yet) is not a row.
    benches = [b for b in selected(args.only) if not b.optional or (BENCH_DIR / b.script).is_file()]
    args.out.mkdir(parents=True, exist_ok=True)
    peers = peer_bin_dir()
    t_start = time.monotonic()
    deadline = t_start + QUICK_BUDGET_S if args.quick else None
    results = []
    for i, bench in enumerate(benches, 1):
        timeout = bench.quick_timeout_s if args.quick else bench.full_timeout_s
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
        if timeout < 15:
            results.append(BenchResult(bench.name, bench.compares, not_run="the 10-minute budget of --quick ran out"))
            continue
        sys.stdout.write(f"[{i}/{len(benches)}] {bench.name} … ")
        sys.stdout.flush()
        r = run_bench(bench, args.quick, args.out, timeout, peers)
        sys.stdout.write(f"{r.seconds:.0f} s, {'not run: ' + r.not_run if r.not_run else 'done'}\n")
        sys.stdout.flush()
        results.append(r)
    seconds = time.monotonic() - t_start
    table = format_table(results)
    sys.stdout.write("\n" + table + "\n\n" + summary_line(results, seconds) + "\n")
    report = {
        "quick": args.quick,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seconds": round(seconds, 1),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "results": [asdict(r) for r in results],
        "table": table,
    }
    (args.out.parent / "run_all.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
