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
