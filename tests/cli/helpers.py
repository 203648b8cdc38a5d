"""Running `hearth` as a user does, in a subprocess from the checkout, with a Hub endpoint and homes that
belong to the test (no saved token, no real Hub)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def isolated_env(tmp_path: Path, endpoint: str, home: Path | None = None, **extra: str) -> dict[str, str]:
    """A bare environment: HF_HOME and HEARTH_HOME under `tmp_path`, the Hub at `endpoint`."""
    return {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HEARTH_HOME": str(home or tmp_path / "home"),
        "PATH": "/usr/bin:/bin",
        "NO_PROXY": "127.0.0.1,localhost",
        # The session's native-check store (tests/conftest.py): the canary checks each model once per run; and a
        # parallel run's share of the cores.
        **{name: os.environ[name] for name in ("HEARTH_NATIVE_CHECKS", "HEARTH_THREADS") if name in os.environ},
        **extra,
    }


def hearth(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, module: str = "app.cli"
) -> subprocess.CompletedProcess:
    """`hearth ARGS` (or `python -m MODULE ARGS`), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout
    )
