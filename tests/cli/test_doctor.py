"""`hearth doctor`, and `hearth run` on a machine where the canary found extra buffer types crashing (as
llama.cpp's AMX kernels do on Sapphire Rapids): the answer comes, and both say what was turned off and why."""

from __future__ import annotations

import json
import os

from app.core.engines.canary.guard import CHECK_SOURCE
from app.core.hardware.native_checks import CheckRecord, NativeCheckStore, fingerprint_of
from tests.cli.helpers import hearth
from tests.helpers import require_llama_cpp


def _env(tmp_path, store) -> dict[str, str]:
    return {**os.environ, "HEARTH_HOME": str(tmp_path / "home"), "HEARTH_NATIVE_CHECKS": str(store)}


def test_doctor_json_describes_this_build(tmp_path):
    require_llama_cpp()
    proc = hearth("doctor", "--json", env=_env(tmp_path, tmp_path / "checks.json"))
    assert proc.returncode in (0, 1), proc.stderr  # 1: a mismatch on this machine, still a report
    report = json.loads(proc.stdout)
    assert report["build"]["version"] and report["build"]["backend"] in ("CPU", "CUDA", "Metal", "Vulkan", "ROCm")
    assert report["verdict"] and report["ok"] == (proc.returncode == 0)
    assert report["checks"] == []


def test_run_answers_without_the_crashing_feature_and_doctor_says_why(tmp_path, smollm2_gguf):
    lib = require_llama_cpp()
    store = tmp_path / "checks.json"
    fp = fingerprint_of(lib)
    weights = "F32,Q4_1,Q8_0"  # SmolLM2-135M-Instruct.Q4_1's tensor types
    off = {"extra_bufts": False, "flash_attn": False, "gpu_offload": False}
    checks = NativeCheckStore(store)
    checks.put(fp, CheckRecord(weights, {**off, "extra_bufts": True}, False, "the check process died with SIGSEGV"))
    checks.put(fp, CheckRecord(weights, off, True, "", smollm2_gguf.name, source=CHECK_SOURCE))  # today's check

    run = hearth(
        "run",
        str(smollm2_gguf),
        "Say hello.",
        "--temp",
        "0",
        "--max-tokens",
        "8",
        env=_env(tmp_path, store),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert "Loaded without extra CPU buffer types" in run.stderr and "SIGSEGV" in run.stderr

    proc = hearth("doctor", "--json", env=_env(tmp_path, store))
    report = json.loads(proc.stdout)
    assert report["turned_off"] == ["extra_bufts"]
    assert any("SIGSEGV" in note for note in report["notes"])

    reset = hearth("doctor", "--reset", env=_env(tmp_path, store))
    assert "forgot 2 native check results" in reset.stderr
    assert NativeCheckStore(store).records(fp) == []
