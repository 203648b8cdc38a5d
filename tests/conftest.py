"""Shared test setup: every test gets its own HEARTH_HOME; nothing reaches the internet."""

from __future__ import annotations

import os

# Set before anything imports huggingface_hub, which reads these at import time.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest_plugins = [
    "tests.fixtures.models",
    "tests.fakehub.fixtures",
    "tests.core.engines.fixtures",
    "tests.ui.chat_harness",
]


@pytest.fixture(autouse=True)
def hearth_home(tmp_path, monkeypatch):
    """An isolated HEARTH_HOME per test: config, data, models, logs and cache all land here."""
    home = tmp_path / "hearth-home"
    monkeypatch.setenv("HEARTH_HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return home
