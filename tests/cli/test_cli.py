import json
import subprocess

from app import __version__
from tests.cli.helpers import hearth


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return hearth(*args)


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"hearth {__version__}"


def test_hw_json_matches_in_process_profile():
    from app.core.hardware import probe_hardware

    proc = run_cli("hw", "--json", "--no-bandwidth")
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    here = probe_hardware(measure_bandwidth=False).to_dict()
    for key in ("os", "arch"):
        assert cli[key] == here[key]
    assert cli["cpu"]["brand"] == here["cpu"]["brand"]
    assert cli["cpu"]["simd"] == here["cpu"]["simd"]
    assert cli["cpu"]["logical_cores"] == here["cpu"]["logical_cores"]
    assert cli["memory"]["total_bytes"] == here["memory"]["total_bytes"]
    assert len(cli["nvidia"]["gpus"]) == len(here["nvidia"]["gpus"])
    assert {e["name"]: e["available"] for e in cli["engines"]} == {e["name"]: e["available"] for e in here["engines"]}


def test_hw_table_is_readable():
    proc = run_cli("hw", "--no-bandwidth")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for heading in ("Hardware", "GPUs", "Engines", "RAM", "SIMD"):
        assert heading in out
    assert "llama.cpp" in out


def test_hw_refresh_quant_speeds_says_what_it_measured(monkeypatch, capsys):
    from app.cli import main
    from app.core.bench import quant_probe
    from app.core.hardware.quant_speed import QuantSpeeds

    asked = []

    def fake_measure(cache_dir, refresh=False):
        asked.append(refresh)
        return QuantSpeeds({"Q4_K": 11.0, "F16": 17.2}, 8.2e-5) if len(asked) == 1 else None

    monkeypatch.setattr(quant_probe, "measure_quant_speeds", fake_measure)
    assert main(["hw", "--no-bandwidth", "--refresh-quant-speeds"]) == 0
    err = capsys.readouterr().err
    assert "F16 17.2 GB/s, Q4_K 11.0 GB/s; 0.082 ms per layer" in err and asked == [True]
    assert main(["hw", "--no-bandwidth", "--refresh-quant-speeds"]) == 0  # the probe failed: the table, said so
    assert "could not measure" in capsys.readouterr().err
