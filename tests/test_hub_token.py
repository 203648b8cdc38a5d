"""The Hub token goes only where the user put it: a token saved on the machine by the Hugging Face CLI
is never sent while Settings say anonymous, and a token in Settings is sent with every request.

Checked on everything that talks to the Hub: `hearth fit`, `hearth search`, `hearth pull` (each a
subprocess, as a user runs it) and the Discover model page (in-process, as the window loads it).
The fake Hub logs every request's headers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.hub.client import HubClient
from app.core.hub.repo_page import load_hub_model
from app.core.models.devices import Device, GiB, Machine
from app.core.settings import Settings
from tests.fakehub import GOOD_TOKEN, gguf_repo

ROOT = Path(__file__).resolve().parents[1]
REPO = "org/Tiny-GGUF"
SAVED = "hf_saved_by_huggingface_cli_login"  # what `hf auth login` leaves in $HF_HOME/token


@pytest.fixture
def hub(fake_hub, quant_files, hf_env):
    """The fake Hub with one GGUF repo, and a token saved in this machine's Hugging Face token file."""
    fake_hub.add_repo(
        gguf_repo(REPO, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes())
    )
    fake_hub.accepted_tokens.add(SAVED)  # so a leaked token would be accepted, not merely refused
    token_file = hf_env.parent / "token"  # huggingface_hub's HF_TOKEN_PATH in this process (hf_env)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(SAVED)
    return fake_hub


def _cli(tmp_path: Path, hub, settings: Settings, *args: str) -> subprocess.CompletedProcess:
    """Run `hearth ARGS` with these Settings; the machine's Hugging Face home holds the saved token."""
    home = tmp_path / "hearth"
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "settings.json").write_text(settings.model_dump_json())
    hf_home = tmp_path / "hf-cli"
    hf_home.mkdir(exist_ok=True)
    (hf_home / "token").write_text(SAVED)
    env = {
        "HEARTH_HOME": str(home),
        "HF_HOME": str(hf_home),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "PATH": "/usr/bin:/bin",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _every_command(tmp_path: Path, hub, settings: Settings) -> dict[str, list[str | None]]:
    """What each command sent as Authorization, one entry per request it made."""
    seen: dict[str, list[str | None]] = {}
    machine = Machine(backend="cpu", cpu=Device("CPU", "cpu", 8 * GiB, 8 * GiB, 50.0, "RAM"), cores=2)
    for name, run in (
        ("fit", lambda: json.loads(_cli(tmp_path, hub, settings, "fit", REPO, "--json").stdout)),
        ("search", lambda: _cli(tmp_path, hub, settings, "search", "tiny")),
        ("model page", lambda: load_hub_model(HubClient.from_settings(settings, env={}), REPO, machine)),
        ("pull", lambda: _cli(tmp_path, hub, settings, "pull", f"{REPO}:Q8_0")),
    ):
        before = len(hub.log)
        run()
        assert hub.wait_idle(10)
        seen[name] = [r.authorization for r in hub.log[before:]]
        assert seen[name], f"{name} made no request"
    return seen


def test_a_token_saved_on_the_machine_is_never_sent_when_settings_are_anonymous(hub, tmp_path):
    seen = _every_command(tmp_path, hub, Settings(hf_endpoint=hub.url))
    assert {name: [a for a in auths if a] for name, auths in seen.items()} == {name: [] for name in seen}
    assert len(seen["fit"]) > 1 and len(seen["pull"]) > 1  # listings, ranged headers, file downloads


def test_the_token_in_settings_goes_with_every_request(hub, tmp_path):
    seen = _every_command(tmp_path, hub, Settings(hf_endpoint=hub.url, hf_token=GOOD_TOKEN))
    expected = f"Bearer {GOOD_TOKEN}"
    assert {name: [a for a in auths if a != expected] for name, auths in seen.items()} == {name: [] for name in seen}
