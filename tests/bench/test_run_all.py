"""bench/run_all.py: how it reads each bench's figures, judges them against their targets and prints one table.
Real benches never run here: the subprocess tests use tiny fake bench scripts."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("hearth_bench_run_all", ROOT / "bench" / "run_all.py")
assert _spec is not None and _spec.loader is not None
run_all = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = run_all
_spec.loader.exec_module(run_all)
Metric, BenchResult, Bench = run_all.Metric, run_all.BenchResult, run_all.Bench


@pytest.mark.parametrize(
    ("value", "op", "target", "met"),
    [
        (1.02, ">=", 1.0, True),
        (0.96, ">=", 0.97, False),
        (0.97, ">=", 0.97, True),
        (4.9, "<", 5.0, True),
        (5.0, "<", 5.0, False),
        (0.15, "<=", 0.15, True),
        (-4.0, "abs<=", 5.0, True),
        (-6.0, "abs<=", 5.0, False),
        (2.0, None, None, None),  # reported, no target
        (None, ">=", 0.9, None),  # not measured
    ],
)
def test_a_metric_is_met_by_its_own_operator(value, op, target, met):
    assert Metric("m", value, target, op).met() is met


def test_metrics_are_read_at_the_top_level_or_under_metrics():
    flat = {"decode": {"value": 0.98, "target": 0.97, "op": ">=", "compares": "ours ÷ theirs"}}
    nested = {"size_bytes": 1, "metrics": {"ttft": {"value": 3.2, "target": 5, "op": "<", "unit": "ms"}}}
    (a,) = run_all.metrics_from_json(flat)
    assert (a.name, a.value, a.target, a.op, a.compares, a.met()) == ("decode", 0.98, 0.97, ">=", "ours ÷ theirs", True)
    (b,) = run_all.metrics_from_json(nested)
    assert (b.name, b.value, b.unit, b.met()) == ("ttft", 3.2, "ms", True)


def test_entries_that_are_not_metrics_are_skipped_and_odd_ones_kept_without_a_verdict():
    data = {
        "reps": 3,
        "notes": ["x"],
        "no value": {"target": 1},
        "curl": {"value": None, "target": 0.9, "op": ">=", "note": "curl not found"},
        "weird": {"value": 1.0, "target": 1.0, "op": "≈"},
    }
    curl, weird = run_all.metrics_from_json(data)
    assert curl.value is None and curl.met() is None and run_all.met_text(curl) == "not run: curl not found"
    assert weird.met() is None and "unknown op" in weird.note
    with pytest.raises(ValueError):
        run_all.metrics_from_json([1, 2])


def fit_row(buffer_pct: float, buffer_mib: float, cal: float, uncal: float) -> dict:
    return {
        "buffer_err_pct": buffer_pct,
        "buffer_err_mib": buffer_mib,
        "decode_err_cal_pct": cal,
        "decode_err_uncal_pct": uncal,
    }


def test_fit_accuracy_figures_are_its_own_verdicts():
    rows = [fit_row(2.0, 40, 5, 30), fit_row(-9.0, -150, -12, -50), fit_row(30.0, 90, 20, 10)]
    memory, worst, median, uncal = run_all.fit_accuracy_metrics({"rows": rows, "bandwidth_gbps": 8})
    assert memory.display == "2/3 cases" and memory.met() is False  # one case is off by 9 % and 150 MiB
    assert worst.value == 20 and worst.met() is False
    assert median.value == 12 and median.met() is True
    assert uncal.value == 30 and uncal.met() is False  # issue 30's target: 15 % before calibration
    for row, size_cal in zip(rows, (4, -8, 30), strict=True):
        row["decode_err_size_cal_pct"] = size_cal
    *_, size = run_all.fit_accuracy_metrics({"rows": rows})
    assert size.name == "decode, calibrated per size (median)" and size.value == 8 and size.target is None
    with pytest.raises(ValueError):
        run_all.fit_accuracy_metrics({"rows": []})


def sample_results() -> list:
    return [
        BenchResult(
            "engine",
            "Hearth vs llama-server",
            [
                Metric("decode", 0.981, 1.0, ">=", compares="decode tok/s ratio"),
                Metric("prefill", 1.04, compares="prefill tok/s ratio"),
            ],
        ),
        BenchResult("download", "ours vs curl", [Metric("resume", 0.0, 1.0, "<", "%", compares="a | b")]),
        BenchResult("ui_latency", "stalls", not_run="exit 1: RuntimeError: no display"),
    ]


def test_the_table_has_every_figure_its_target_and_verdict_and_a_row_per_bench_not_run():
    rows = run_all.table_rows(sample_results())
    assert rows == [
        ("engine", "decode", "decode tok/s ratio", "0.981", ">= 1", "NO"),
        ("engine", "prefill", "prefill tok/s ratio", "1.04", "—", "—"),
        ("download", "resume", "a | b", "0.000 %", "< 1 %", "yes"),
        ("ui_latency", "—", "stalls", "—", "—", "not run: exit 1: RuntimeError: no display"),
    ]


def test_the_table_is_markdown_with_aligned_columns():
    lines = run_all.format_table(sample_results()).splitlines()
    assert lines[0].split("|")[1].strip() == "bench" and set(lines[1]) <= {"|", "-"}
    assert len({len(line) for line in lines}) == 1  # padded: every line as long as the others
    assert "a \\| b" in lines[4]  # a pipe in a cell does not split the Markdown table
    assert len(lines) == 2 + 4


def test_the_summary_counts_targets_met_and_benches_not_run():
    text = run_all.summary_line(sample_results(), 125)
    assert text == "1 of 2 targets met; not run: ui_latency; 2.1 min in all"


def fake_bench_dir(tmp_path: Path, monkeypatch, scripts: dict[str, str]) -> Path:
    for name, body in scripts.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    monkeypatch.setattr(run_all, "BENCH_DIR", tmp_path)
    return tmp_path


def test_arguments_per_bench_quick_or_full_and_peers(tmp_path, monkeypatch):
    fake_bench_dir(tmp_path, monkeypatch, {"engine.py": "", "endpoint.py": "", "plain.py": "", "board.py": ""})
    out = tmp_path / "o.json"
    engine = Bench("engine", "engine.py", "", quick=("--runs", "2"), full=("--runs", "5"), peer="required")
    cmd, reason, _ = run_all.command_for(engine, True, out, Path("/peers"))
    assert cmd[2:] == ["--runs", "2", "--bin", "/peers", "--json", str(out)] and not reason
    cmd, _, _ = run_all.command_for(engine, False, out, Path("/peers"))
    assert cmd[2:4] == ["--runs", "5"]
    cmd, reason, _ = run_all.command_for(engine, True, out, None)
    assert cmd is None and "build_peers.sh" in reason
    endpoint = Bench("endpoint", "endpoint.py", "", peer="optional")
    cmd, reason, notes = run_all.command_for(endpoint, True, out, None)
    assert cmd[2:] == ["--no-peer", "--json", str(out)] and notes and not reason
    cmd, _, notes = run_all.command_for(endpoint, True, out, Path("/peers"))
    assert cmd[2:] == ["--bin", "/peers", "--json", str(out)] and not notes  # the folder found, never a build
    fit = Bench("fit", "plain.py", "", quick=("--quick",), out_flag="--out")
    cmd, _, _ = run_all.command_for(fit, True, out, None)
    assert cmd[2:] == ["--quick", "--out", str(out)]
    board = Bench("board", "board.py", "", out_flag=None, log_reader=run_all.speed_scoreboard_metrics)
    assert run_all.command_for(board, True, out, Path("/peers"))[0][2:] == []
    missing = Bench("gone", "gone.py", "")
    assert run_all.command_for(missing, True, out, None)[:2] == (None, "gone.py not found")


GOOD = """
import json, sys
out = sys.argv[sys.argv.index("--json") + 1]
json.dump({"ratio": {"value": 0.99, "target": 0.97, "op": ">="}}, open(out, "w"))
print("done")
"""
FAILS = """
print("starting")
raise RuntimeError("llama-server did not start")
"""
HANGS = """
import time
time.sleep(60)
"""
SILENT = "print('no figures')\n"
GARBLED = """
import sys
open(sys.argv[sys.argv.index("--json") + 1], "w").write("{not json")
"""


def test_each_bench_runs_as_its_own_process_and_a_failure_is_a_reason(tmp_path, monkeypatch):
    scripts = {"good.py": GOOD, "fails.py": FAILS, "hangs.py": HANGS, "silent.py": SILENT, "garbled.py": GARBLED}
    fake_bench_dir(tmp_path, monkeypatch, scripts)
    out = tmp_path / "out"
    out.mkdir()

    def bench(name: str, timeout: float = 30):
        return run_all.run_bench(Bench(name, f"{name}.py", "fake"), True, out, timeout, None)

    good = bench("good")
    assert not good.not_run and [(m.name, m.value, m.met()) for m in good.metrics] == [("ratio", 0.99, True)]
    assert "done" in (out / "good.log").read_text()
    assert bench("fails").not_run == "exit 1: RuntimeError: llama-server did not start"
    t0 = time.monotonic()
    hung = bench("hangs", timeout=1)
    assert hung.not_run.startswith("timed out after 1 s") and time.monotonic() - t0 < 20
    assert bench("silent").not_run == "ran, but wrote no figures (no --json file)"
    assert bench("garbled").not_run.startswith("figures unreadable")


def test_main_prints_one_table_writes_the_report_and_keeps_the_quick_budget(tmp_path, monkeypatch, capsys):
    fake_bench_dir(tmp_path, monkeypatch, {"good.py": GOOD, "fails.py": FAILS})
    monkeypatch.setattr(
        run_all,
        "BENCHES",
        [
            Bench("good", "good.py", "a fake that meets its target"),
            Bench("fails", "fails.py", "a fake that crashes"),
            Bench("later", "later.py", "an optional bench not written yet", optional=True),
        ],
    )
    out = tmp_path / "out" / "run_all"
    assert run_all.main(["--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| good " in text and "| yes " in text and "not run: exit 1: RuntimeError" in text
    assert "later" not in text  # an optional bench that does not exist is no row
    assert "1 of 1 targets met; not run: fails" in text
    report = json.loads((out.parent / "run_all.json").read_text())
    assert report["quick"] is True and [r["bench"] for r in report["results"]] == ["good", "fails"]

    monkeypatch.setattr(run_all, "QUICK_BUDGET_S", 0)
    assert run_all.main(["--quick", "--out", str(out), "--only", "good"]) == 0
    assert "not run: the 10-minute budget of --quick ran out" in capsys.readouterr().out


def test_an_unknown_bench_name_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown bench nope"):
        run_all.main(["--only", "nope"])


SCOREBOARD_LOG = """constants: {}
Apple, prefill: 28 rows, median |error| 6.9 %, max 47.0 %

targets on held-out rows: decode median 4.5 % (≤ 10), max 78.9 % (≤ 25); prefill median 10.2 % (≤ 30): NOT all met
"""


def test_the_speed_scoreboard_is_read_from_its_closing_line():
    median, worst, prefill = run_all.speed_scoreboard_metrics(SCOREBOARD_LOG)
    assert (median.value, median.target, median.met()) == (4.5, 10.0, True)
    assert (worst.name, worst.value, worst.target, worst.met()) == ("held-out decode, worst row", 78.9, 25.0, False)
    assert (prefill.value, prefill.target, prefill.met()) == (10.2, 30.0, True)
    with pytest.raises(ValueError, match="targets on held-out rows"):
        run_all.speed_scoreboard_metrics("constants: {}\n")


def test_a_bench_without_json_is_read_from_its_log(tmp_path, monkeypatch):
    script = "print(" + repr(SCOREBOARD_LOG) + ")\n"
    fake_bench_dir(tmp_path, monkeypatch, {"board.py": script})
    bench = Bench("board", "board.py", "", out_flag=None, log_reader=run_all.speed_scoreboard_metrics)
    result = run_all.run_bench(bench, True, tmp_path, 30, None)
    assert not result.not_run and [m.value for m in result.metrics] == [4.5, 78.9, 10.2]
