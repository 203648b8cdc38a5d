"""Pytest plugin: a fake Hub per test and a huggingface_hub client that can reach nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakehub.server import FakeHub

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture
def fake_hub():
    """A running FakeHub on 127.0.0.1 (empty; add repos with `fake_hub.add_repo`), closed after the test."""
    with FakeHub() as hub:
        yield hub
    assert not hub.errors, f"the fake Hub itself failed: {hub.errors!r}"


@pytest.fixture
def hf_env(fake_hub, tmp_path, monkeypatch) -> Path:
    """Point huggingface_hub at the fake and at a temp HF_HOME; returns the hub cache folder.

    The client reads its settings at import time, so both the environment and `huggingface_hub.constants` are set.
    Any request to a non-loopback host raises, so a test cannot reach the internet by accident.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent, _http

    home = tmp_path / "hf-home"
    env = {
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HOME": str(home),
        "HF_ENDPOINT": fake_hub.url,
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)

    patched = {
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_SHARED_BLOBS": True,
        "ENDPOINT": fake_hub.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": fake_hub.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HUGGINGFACE_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "CHECK_FOR_UPDATE_DONE_PATH": str(home / ".check_for_update_done"),
        "CHECK_FOR_SKILL_UPDATE_DONE_PATH": str(home / ".check_for_skill_update_done"),
        "HF_XET_CACHE": str(home / "xet"),
    }
    for name, value in patched.items():
        if hasattr(constants, name):
            monkeypatch.setattr(constants, name, value)
    # The agent registry would otherwise be fetched once from the public Hub.
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)

    def guard(request) -> None:
        if request.url.host not in _LOOPBACK_HOSTS:
            raise RuntimeError(f"huggingface_hub tried to leave the fake Hub: {request.url}")

    def factory():
        client = _http.default_client_factory()
        client.event_hooks["request"] = [*client.event_hooks["request"], guard]
        return client

    _http.set_client_factory(factory)
    try:
        yield home / "hub"
    finally:
        _http.set_client_factory(_http.default_client_factory)


@pytest.fixture
def hf_api(hf_env, fake_hub):
    """`HfApi` bound to the fake Hub, anonymous, telemetry and Xet off."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=fake_hub.url, token=None)
