"""`hearth fit` on a Hub repo (through the same client as `hearth pull`: Settings → Hub wins over HF_ENDPOINT),
a local file, and a bad path."""

from __future__ import annotations

import json

from app.core.paths import app_paths
from app.core.settings import Settings, SettingsStore
from tests.cli.helpers import hearth, isolated_env
from tests.fakehub import gguf_repo


def test_fit_uses_the_mirror_from_settings(fake_hub, quant_files, tmp_path):
    fake_hub.add_repo(
        gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    home = tmp_path / "home"
    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    SettingsStore(paths.settings_file).save(Settings(hf_endpoint=fake_hub.url))
    env = isolated_env(tmp_path, "http://127.0.0.1:9", home)  # the environment's endpoint leads nowhere
    proc = hearth("fit", "org/Tiny-GGUF", "--ctx", "2048", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommended"] == "Q8_0"
    assert fake_hub.requests("GET", "/api/models/org/Tiny-GGUF")


def test_hearth_fit_cli_against_the_fake_hub(fake_hub, hf_env, quant_files, tmp_path):
    fake_hub.add_repo(
        gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    env = isolated_env(tmp_path, fake_hub.url)
    proc = hearth("fit", "org/Tiny-GGUF", "--ctx", "2048", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["recommended"] == "Q8_0"  # F16 is no better than Q8_0 and twice the size
    labels = {v["label"]: v for v in out["variants"]}
    assert labels["F16"]["plan"]["verdict"] == "cpu" and labels["Q8_0"]["recommended"]
    table = hearth("fit", "org/Tiny-GGUF", env=env).stdout
    assert "* Q8_0" in table and "Recommended: Q8_0" in table


def test_hearth_fit_cli_on_a_local_file(smollm2_gguf):
    proc = hearth("fit", str(smollm2_gguf), "--ctx", "4096", "--kv", "q8_0", "--json")
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)["variants"][0]
    assert v["label"] == "Q4_1" and v["plan"]["n_ctx"] == 4096
    cpu = v["plan"]["devices"][0]
    assert cpu["kv"] == 30 * 3 * 64 * 4096 * 2 * 34 // 32  # 30 layers, 3 KV heads of 64, K and V at q8_0


def test_hearth_fit_cli_reports_a_bad_path(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    proc = hearth("fit", str(bad), timeout=60)
    assert proc.returncode == 1 and "hearth fit:" in proc.stderr
