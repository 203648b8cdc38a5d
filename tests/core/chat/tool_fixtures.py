"""A scripted model that calls the test MCP server's tools, and the fixtures that run it: `servers` (the test
server over stdio) and `make_host(script)` (a FakeEngine host). Plugged in by tests/core/chat/conftest.py."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from app.core.chat.tool_loop import function_name
from app.core.engines.base import LoadSpec
from app.core.mcp.config import parse_config, save_config
from app.core.mcp.secrets import SecretStore
from app.core.mcp.servers import McpServers
from app.core.runtime.engine_host import EngineHost
from tests.fixtures.fake_engine import registry_with_fake
from tests.ui.chat_harness import no_preflight

SERVER = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py")


def call(tool: str, **arguments) -> str:
    return "<tool_call> " + json.dumps({"name": function_name("tools", tool), "arguments": arguments}) + " </tool_call>"


def scripted(*turns: str):
    """The model's replies in order, by how many tool results it has read since the last question."""

    def reply(request) -> str:
        messages = list(request.messages or ())
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        done = sum(1 for m in messages[last_user + 1 :] if m.role == "tool")  # this question's results
        return turns[min(done, len(turns) - 1)]

    return reply


def stop_soon(cancel: threading.Event):
    """An approval that lets the call run and presses Stop a moment after it starts: the stop lands while the
    tool runs however long the model took to ask for it (a fixed timer from the start raced a busy machine)."""

    def approve(_call) -> str:
        threading.Timer(0.3, cancel.set).start()
        return "once"

    return approve


@pytest.fixture
def servers(tmp_path):
    config = parse_config(json.dumps({"mcpServers": {"tools": {"command": sys.executable, "args": [SERVER]}}}), "t")
    save_config(tmp_path / "mcp.json", config)
    hub = McpServers(tmp_path, SecretStore(tmp_path / "s.json"))
    yield hub
    hub.close()


@pytest.fixture
def make_host():
    hosts = []

    def make(script) -> EngineHost:
        engines: list = []
        host = EngineHost(registry_with_fake(engines, script=script), preflight=no_preflight, name="test-tool-loop")
        host.load_sync(LoadSpec(path=Path("/nonexistent/model.fake"), n_ctx=4096), "fake")
        host.engines = engines  # type: ignore[attr-defined]  # the test reads what the engine was asked
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        assert host.shutdown(5)
