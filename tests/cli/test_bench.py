"""`hearth bench` as a user runs it: on the tiny model through the engine host (a subprocess, once for the
module), and against a Hearth server started here with --endpoint: both reports validate against the
published schema and have the same shape. Ctrl-C leaves no report; bad input is a clear error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import bench as cli_bench
from app.cli import build_parser, main
from app.cli.context import CliContext
from app.core.bench.runner import HostRunner
from app.core.bench.store import BenchStore
from app.core.engines.base import LoadSpec
from app.core.runtime.engine_host import EngineHost
from app.core.runtime.jobs import JobHandle
from tests.cli.test_serve import _start
from tests.core.bench.test_host_runner import validate_against_schema
from tests.fixtures.fake_engine import registry_with_fake
from tests.helpers import require_llama_cpp

ROOT = Path(__file__).resolve().parents[2]
TINY_ARGS = ["--prompt-lens", "32,64", "--gen-len", "8", "--concurrency", "1,2", "--runs", "2", "--shared-prefix", "24"]


def _bench(args: list[str], home: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, HEARTH_HOME=str(home), NO_PROXY="127.0.0.1,localhost")
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _saved(home: Path) -> list[Path]:
    return sorted((home / "data" / "bench").glob("*.json"))


@pytest.fixture(scope="module")
def host_bench(tiny_gguf_f16: Path, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """`hearth bench tiny.gguf …` run once: (process, its HEARTH_HOME, the --json copy)."""
    require_llama_cpp()
    home = tmp_path_factory.mktemp("bench-home")
    out = home / "copy.json"
    return _bench([str(tiny_gguf_f16), *TINY_ARGS, "--json", str(out)], home), home, out


def _cells_ok(report: dict) -> None:
    assert [(c["prompt_len"], c["concurrency"]) for c in report["cells"]] == [(32, 1), (32, 2), (64, 1), (64, 2)]
    for cell in report["cells"]:
        assert cell["completed"] == cell["requests"] == 2 * cell["concurrency"]
        for key in ("ttft_s", "tpot_s", "e2e_s"):
            d = cell[key]
            assert d["p50"] <= d["p95"] <= d["p99"], (key, d)
        assert cell["prefill_tok_s"] > 0 and cell["decode_tok_s"] > 0  # both, measured apart
        assert cell["output_tokens"] >= 2


@pytest.mark.slow
def test_bench_on_the_tiny_model_saves_a_report_that_validates(host_bench):
    proc, home, out = host_bench
    assert proc.returncode == 0, proc.stderr
    (saved,) = _saved(home)
    assert f"report saved: {saved}" in proc.stderr
    assert json.loads(out.read_text()) == json.loads(saved.read_text())  # --json wrote the same report
    text = saved.read_text()
    validate_against_schema(text)
    report = json.loads(text)
    _cells_ok(report)
    assert report["engine"]["name"] == "llama.cpp" and report["engine"]["flags"]["threads"]
    assert report["engine"]["build_info"] and report["weights"]["quant_type"] == "F16"
    assert len(report["weights"]["sha256"]) == 64 and report["model"]["parameters"] > 0
    for cell in report["cells"]:  # the planner's prediction beside each measured figure
        assert cell["predicted"]["decode_tok_s"] > 0 and cell["measured_vs_predicted"]["decode"] > 0
    assert [p["prompt_len"] for p in report["shared_prefix"]] == [32, 64]
    for prefix in report["shared_prefix"]:  # the warm request found the 24 shared tokens in the cache
        assert prefix["prefix_tokens"] == 24 and prefix["cached_tokens"] >= 20
    assert report["memory"]["peak_bytes"] > 0 and report["memory"]["headroom_bytes"] > 0
    # The table: a row per cell with the prediction in brackets.
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["32"], ["64"])]
    assert [r[:2] for r in rows] == [["32", "1"], ["32", "2"], ["64", "1"], ["64", "2"]]
    assert "(pred)" in proc.stdout and "shared prefix of 24 tokens" in proc.stdout
    # The measured speeds went to the planner's calibration: one run per prompt length.
    runs = json.loads((home / "cache" / "calibration.json").read_text())["runs"]
    assert len(runs) == 2 and all(r["measured_decode"] > 0 and r["predicted_prefill"] > 0 for r in runs)


def _shape(value):
    """The keys of every object, recursively (lists: the shape of their first item)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "hardware"}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_shape(value[0])]
    return None


@pytest.mark.slow
def test_endpoint_against_a_hearth_server_gives_the_same_shape(host_bench, tiny_gguf_f16, tmp_path):
    proc, home, _ = host_bench
    assert proc.returncode == 0, proc.stderr
    local = json.loads(_saved(home)[0].read_text())
    server, url, _ = _start(["--model", str(tiny_gguf_f16), "--port", "0"], tmp_path / "server-home")
    try:
        remote_home = tmp_path / "client-home"
        result = _bench(["--endpoint", url + "/v1", *TINY_ARGS], remote_home)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(15) == 0
    assert result.returncode == 0, result.stderr
    text = _saved(remote_home)[0].read_text()
    validate_against_schema(text)
    remote = json.loads(text)
    _cells_ok(remote)
    assert _shape(remote) == _shape(local)
    assert remote["engine"]["kind"] == "endpoint" and remote["engine"]["name"] == "Hearth"
    assert remote["engine"]["url"] == url and remote["model"]["name"] == "tiny-llama-F16"
    assert all(p["cached_tokens"] >= 20 for p in remote["shared_prefix"])  # Hearth reports them in usage


def test_malformed_prompt_lens_is_a_clear_error(capsys):
    assert main(["bench", "model.gguf", "--prompt-lens", "128,abc"]) == 2
    assert "hearth bench: --prompt-lens: 'abc' is not a whole number" in capsys.readouterr().err


def test_bad_workload_values_are_clear_errors(capsys):
    assert main(["bench", "model.gguf", "--prompt-lens", "512", "--ctx", "100"]) == 2
    assert "--ctx 656 or more" in capsys.readouterr().err
    assert main(["bench", "model.gguf", "--preset", "nope"]) == 2
    assert "no preset 'nope'; the presets are: chat, long document" in capsys.readouterr().err
    assert main(["bench"]) == 2
    assert "name a model" in capsys.readouterr().err


def test_a_model_that_is_not_there_is_a_clear_error(capsys):
    assert main(["bench", "no-such-model", "--prompt-lens", "16", "--runs", "1"]) == 1
    assert "'no-such-model' is neither a file nor a model in your library" in capsys.readouterr().err


def test_an_unreachable_endpoint_is_a_clear_error(capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["bench", "--endpoint", f"http://127.0.0.1:{port}", "--prompt-lens", "16"]) == 1
    assert f"cannot reach http://127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["bench", "--endpoint", "ftp://example", "--prompt-lens", "16"]) == 1
    assert "is not an http:// or https:// URL" in capsys.readouterr().err


def test_ctrl_c_cancels_and_leaves_no_report(monkeypatch, tmp_path, capsys, hearth_home):
    """Ctrl-C while a request runs (KeyboardInterrupt in the waiting main thread, as the terminal sends it)."""
    path = tmp_path / "model.fake"
    path.write_bytes(b"fake")
    host = EngineHost(registry_with_fake(tok_s=200), name="test-cli-bench")
    ran = []

    def fake_runner(ctx, args, workload, progress):
        load = LoadSpec(path=path, n_ctx=workload.target_ctx)
        runner = HostRunner(host, load, "fake", workload, calibration=ctx.calibration, progress=progress)
        ran.append(runner)
        return runner, host

    real_wait = JobHandle.wait
    calls = []

    def wait(self, timeout=None):
        calls.append(self)
        if len(calls) == 60:  # well into the measured requests
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(cli_bench, "_host_runner", fake_runner)
    monkeypatch.setattr(JobHandle, "wait", wait)
    args = build_parser().parse_args(["bench", str(path), "--prompt-lens", "16,32", "--gen-len", "200", "--runs", "5"])
    ctx = CliContext("bench")
    assert cli_bench.cmd_bench(ctx, args) == cli_bench.EXIT_INTERRUPTED == 130
    assert "hearth bench: cancelled; no report was saved" in capsys.readouterr().err
    assert ran and ran[0].cancel.is_set() and calls[59].cancelled  # the running request was stopped
    assert BenchStore.for_paths(ctx.paths).list() == []
    assert not (ctx.paths.data / "bench").exists() or not any((ctx.paths.data / "bench").iterdir())
    assert not ctx.paths.calibration_file.exists()  # a cancelled run teaches the planner nothing
