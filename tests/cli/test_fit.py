"""`hearth fit` reaches the Hub through the same client as `hearth pull`: Settings → Hub wins over HF_ENDPOINT."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from app.core.paths import app_paths
from app.core.settings import Settings, SettingsStore
from tests.fakehub import gguf_repo

ROOT = Path(__file__).resolve().parents[2]


def test_fit_uses_the_mirror_from_settings(fake_hub, quant_files, tmp_path):
    fake_hub.add_repo(gguf_repo("org/Tiny-GGUF", quants=("F16", "Q8_0"), split=None,
                                make_gguf=lambda q: quant_files[q].read_bytes()))
    home = tmp_path / "home"
    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    SettingsStore(paths.settings_file).save(Settings(hf_endpoint=fake_hub.url))
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
           "HF_HOME": str(tmp_path / "hf"), "HEARTH_HOME": str(home), "PATH": "/usr/bin:/bin",
           "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "fit", "org/Tiny-GGUF", "--ctx", "2048", "--json"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommended"] == "Q8_0"
    assert fake_hub.requests("GET", "/api/models/org/Tiny-GGUF")

