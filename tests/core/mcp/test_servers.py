"""MCP servers through the official SDK, against a small server written in the tests (stdio and Streamable
HTTP): tools listed, a call's round trip, the tool's own error, a 1 MB answer cut with a note, a hang that times
out, a crash that ends the connection and is restarted, a server that never answers or cannot start; its
secret reaches the process and never the log."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.mcp.config import parse_config, save_config
from app.core.mcp.secrets import SecretStore, keep_secrets
from app.core.mcp.servers import MAX_RESULT_CHARS, McpError, McpServers

SERVER = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py")


def configure(tmp_path: Path, servers: dict) -> SecretStore:
    store = SecretStore(tmp_path / "mcp-secrets.json")
    save_config(tmp_path / "mcp.json", keep_secrets(parse_config(json.dumps({"mcpServers": servers}), "t"), store))
    return store


@pytest.fixture
def make_servers(tmp_path):
    made: list[McpServers] = []

    def make(servers: dict, **kwargs) -> McpServers:
        store = configure(tmp_path, servers)
        hub = McpServers(tmp_path, store, log_dir=tmp_path / "logs", **kwargs)
        made.append(hub)
        return hub

    yield make
    for hub in made:
        hub.close()


STDIO = {"tools": {"command": sys.executable, "args": [SERVER], "env": {"DEMO_API_KEY": "k-123", "MODE": "test"}}}


def test_a_stdio_server_lists_its_tools_and_answers_a_call(make_servers, caplog):
    caplog.set_level(logging.DEBUG)
    servers = make_servers(STDIO)
    assert [s.line for s in servers.states()] == ["stopped"]  # nothing starts before it is needed
    state = servers.start("tools").result(60)
    assert state.line == "ready with 7 tools"
    add = next(t for t in state.tools if t.name == "add")
    assert add.description == "Add two whole numbers." and add.input_schema["required"] == ["a", "b"]
    result = servers.call("tools", "add", {"a": 2, "b": 40}).result(30)
    assert (result.text, result.is_error, result.truncated) == ("42", False, False)
    # The secret went to the process from the store; it is in no log line.
    assert servers.call("tools", "env", {"name": "DEMO_API_KEY"}).result(30).text == "k-123"
    assert "k-123" not in caplog.text and "k-123" not in (Path(servers.config_path)).read_text()


def test_errors_big_answers_and_hangs_come_back_as_the_model_needs_them(make_servers):
    servers = make_servers(STDIO)
    failed = servers.call("tools", "fail", {"why": "no such file"}).result(60)
    assert failed.is_error
    big = servers.call("tools", "big", {"chars": 1_000_000}).result(60)
    assert big.truncated and len(big.text) < MAX_RESULT_CHARS + 200
    assert big.text.endswith(
        f"[output cut: the tool returned 1,000,000 characters; only the first {MAX_RESULT_CHARS:,} are shown]"
    )
    with pytest.raises(McpError, match=r"tools\.hang did not answer within 1 s"):
        servers.call("tools", "hang", {"seconds": 3}, timeout_s=1).result(30)
    with pytest.raises(McpError, match="has no tool named 'nope'"):
        servers.call("tools", "nope", {}).result(30)
    with pytest.raises(McpError, match="no MCP server named 'other'"):
        servers.call("other", "add", {})


def test_a_crash_ends_the_connection_and_the_next_call_starts_it_again(make_servers):
    servers = make_servers(STDIO)
    servers.start("tools").result(60)
    with pytest.raises(McpError, match=r"tools\.crash failed"):
        servers.call("tools", "crash", {}).result(30)
    assert servers.state("tools").status == "failed"
    time.sleep(1.1)  # the first pause before a restart
    assert servers.call("tools", "echo", {"text": "back"}).result(60).text == "back"
    assert servers.state("tools").status == "ready"


def test_a_server_that_never_answers_or_cannot_start_fails_with_the_reason(make_servers):
    servers = make_servers(
        {
            "silent": {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]},
            "missing": {"command": "/nonexistent/mcp-server"},
        },
        start_timeout_s=2,
    )
    with pytest.raises(McpError, match="silent failed: it did not start within 2 s"):
        servers.start("silent").result(30)
    with pytest.raises(McpError, match="missing failed: "):
        servers.start("missing").result(30)
    assert [s.status for s in servers.states()] == ["failed", "failed"]
    with pytest.raises(McpError, match="trying again in"):  # not hammered: a pause before the next try
        servers.start("missing").result(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streamable_http_server_with_a_bearer_header(make_servers):
    port = _free_port()
    process = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        servers = make_servers(
            {"web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer t0ken"}}}
        )
        assert servers.start("web").result(60).line == "ready with 7 tools"
        assert servers.call("web", "echo", {"text": "over http"}).result(30).text == "over http"
        assert "t0ken" not in servers.config_path.read_text()
    finally:
        process.terminate()
        process.wait(10)


def test_a_broken_file_means_no_servers_and_says_why_until_it_is_fixed(tmp_path):
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {}}}')
    servers = McpServers(tmp_path, SecretStore(tmp_path / "s.json"))
    try:
        assert servers.states() == [] and "either a command" in servers.config_error
        (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": STDIO}))
        servers.reload()
        assert [s.name for s in servers.states()] == ["tools"] and servers.config_error == ""
    finally:
        servers.close()


def test_a_server_that_prints_junk_on_stdout_gets_one_short_warning_a_line_and_then_a_count(tmp_path, caplog):
    """The SDK logs a traceback for each line; Hearth's log gets NOISE_LINES short lines a minute for the
    server, then how many more there were, and the server still works."""
    from app.core.mcp.servers import NOISE_LINES

    caplog.set_level(logging.DEBUG)
    store = configure(
        tmp_path, {"noisy": {"command": sys.executable, "args": [SERVER], "env": {"MCP_TEST_JUNK": "10"}}}
    )
    servers = McpServers(tmp_path, store, log_dir=tmp_path / "logs")
    try:
        assert servers.start("noisy").result(60).status == "ready"
        assert servers.call("noisy", "echo", {"text": "still here"}).result(30).text == "still here"
    finally:
        servers.close()
    assert not [r for r in caplog.records if r.exc_info or r.exc_text], "no traceback for a stray line"
    lines = [r.getMessage() for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    one_each = [m for m in lines if "wrote a line" in m]
    assert len(one_each) == NOISE_LINES and all("noisy" in m and "junk line" in m for m in one_each), lines
    assert any(f"noisy wrote {10 - NOISE_LINES} more lines" in m for m in lines), lines
