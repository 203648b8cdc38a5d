"""A Hub repo's variants with real metadata, read over loopback from the fake Hub."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.models.errors import ModelFileError
from app.core.models.hub_variants import variants_from_repo
from app.core.models.local_variants import variants_from_path
from tests.fakehub import gguf_repo, pickle_repo
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def quant_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("quants")
    return {q: write_tiny_llama_gguf(d / f"t-{q}.gguf", dtype=q, n_ctx=4096) for q in ("F16", "Q8_0")}


def test_repo_variants_read_headers_by_range(fake_hub, hf_api, quant_files):
    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None,
                                make_gguf=lambda q: quant_files[q].read_bytes()))
    variants = variants_from_repo("org/Tiny-GGUF", api=hf_api)
    by = {v.label: v for v in variants}
    assert set(by) == {"F16", "Q8_0"}
    local = variants_from_path(quant_files["Q8_0"])[0]
    assert by["Q8_0"].spec.block_bytes == local.spec.block_bytes
    assert by["Q8_0"].spec.n_ctx_train == 4096
    assert by["F16"].size_bytes == quant_files["F16"].stat().st_size
    gets = fake_hub.requests("GET", "/resolve/")
    assert gets and all(r.range for r in gets)


def test_pickle_only_repo_is_refused(fake_hub, hf_api):
    fake_hub.add_repo(pickle_repo("org/Old-Model"))
    with pytest.raises(ModelFileError, match="pickle"):
        variants_from_repo("org/Old-Model", api=hf_api)


def test_missing_repo_says_so(fake_hub, hf_api):
    with pytest.raises(ModelFileError, match="no such model"):
        variants_from_repo("org/Nope", api=hf_api)


def test_hearth_fit_cli_against_the_fake_hub(fake_hub, hf_env, quant_files, tmp_path):
    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None,
                                make_gguf=lambda q: quant_files[q].read_bytes()))
    env = {"HF_ENDPOINT": fake_hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
           "HF_HOME": str(tmp_path / "hf"), "HEARTH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "fit", "org/Tiny-GGUF", "--ctx", "2048", "--json"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["recommended"] == "Q8_0"  # F16 is no better than Q8_0 and twice the size
    labels = {v["label"]: v for v in out["variants"]}
    assert labels["F16"]["plan"]["verdict"] == "cpu" and labels["Q8_0"]["recommended"]
    table = subprocess.run([sys.executable, "-m", "app.cli", "fit", "org/Tiny-GGUF"], cwd=ROOT,
                           capture_output=True, text=True, env=env, timeout=120).stdout
    assert "* Q8_0" in table and "Recommended: Q8_0" in table


def test_hearth_fit_cli_on_a_local_file(smollm2_gguf):
    proc = subprocess.run([sys.executable, "-m", "app.cli", "fit", str(smollm2_gguf), "--ctx", "4096",
                           "--kv", "q8_0", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)["variants"][0]
    assert v["label"] == "Q4_1" and v["plan"]["n_ctx"] == 4096
    cpu = v["plan"]["devices"][0]
    assert cpu["kv"] == 30 * 3 * 64 * 4096 * 2 * 34 // 32  # 30 layers, 3 KV heads of 64, K and V at q8_0


def test_hearth_fit_cli_reports_a_bad_path(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    proc = subprocess.run([sys.executable, "-m", "app.cli", "fit", str(bad)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "hearth fit:" in proc.stderr
