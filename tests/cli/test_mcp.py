"""`hearth mcp import / ls / call`, as a user runs them: another program's file brought in with its secret
kept out of mcp.json, every server listed with its state and tools, one tool called."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from tests.cli.helpers import hearth, isolated_env

SERVER = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py")


def test_import_ls_and_call(tmp_path):
    env = isolated_env(tmp_path, "http://127.0.0.1:9")
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "tools": {"command": sys.executable, "args": [SERVER], "env": {"DEMO_TOKEN": "s3cret"}},
                    "broken": {"command": "/nonexistent/server"},
                }
            }
        )
    )
    imported = hearth("mcp", "import", str(claude), env=env)
    assert imported.returncode == 0, imported.stderr
    assert f"Added tools: it will run {sys.executable} {SERVER}" in imported.stdout
    assert "secrets are kept in" in imported.stdout
    config = tmp_path / "home" / "config" / "mcp.json"
    assert "s3cret" not in config.read_text() and stat.S_IMODE(config.stat().st_mode) == 0o600

    listed = hearth("mcp", "ls", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    states = {s["name"]: s for s in json.loads(listed.stdout)}
    assert states["tools"]["status"] == "ready" and "add" in [t["name"] for t in states["tools"]["tools"]]
    assert states["broken"]["status"] == "failed" and states["broken"]["error"]
    text = hearth("mcp", "ls", env=env)
    assert "tools: ready with 7 tools" in text.stdout and "  - add: Add two whole numbers." in text.stdout

    called = hearth("mcp", "call", "tools", "add", '{"a": 1, "b": 2}', env=env)
    assert (called.returncode, called.stdout.strip()) == (0, "3")
    secret = hearth("mcp", "call", "tools", "env", '{"name": "DEMO_TOKEN"}', env=env)
    assert secret.stdout.strip() == "s3cret"  # from the store, at start
    failed = hearth("mcp", "call", "tools", "fail", '{"why": "x"}', "--json", env=env)
    assert failed.returncode == 1 and json.loads(failed.stdout)["is_error"] is True
    bad = hearth("mcp", "call", "tools", "add", "[1]", env=env)
    assert bad.returncode == 2 and "must be a JSON object" in bad.stderr

    again = hearth("mcp", "import", str(claude), env=env)
    assert "Kept the servers already here: tools, broken (--replace replaces them)" in again.stdout


def only_add_server(tmp_path: Path) -> dict[str, str]:
    """A home whose mcp.json has the test server with its `add` tool only (a real model may pick any tool)."""
    config = tmp_path / "home" / "config" / "mcp.json"
    config.parent.mkdir(parents=True)
    only = {"MCP_TEST_ONLY": "add"}
    config.write_text(json.dumps({"mcpServers": {"tools": {"command": sys.executable, "args": [SERVER], "env": only}}}))
    return isolated_env(tmp_path, "http://127.0.0.1:9")


def test_smollm2_forced_to_call_a_tool_ends_with_the_call_and_its_result(tmp_path, smollm2_gguf):
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    env = only_add_server(tmp_path)
    args = ("--temp", "0", "--max-tokens", "48", "--ctx", "2048")
    unknown = hearth("run", str(smollm2_gguf), "Add 2 and 3.", "--tools", "nope", *args, env=env)
    assert unknown.returncode == 2 and "no MCP server named nope" in unknown.stderr  # before the model loads

    run = hearth(
        "run",
        str(smollm2_gguf),
        "Add 2 and 3 with the add tool.",
        "--tools",
        "tools",
        "--tool-choice",
        "required",
        "--yes",
        "--json",
        *args,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    transcript = json.loads(run.stdout)
    first = transcript["tool_calls"][0]  # the grammar made the first turn a call
    assert (first["server"], first["tool"]) == ("tools", "add")
    assert first["result"] is not None or "arguments" in (first["error"] or "")
    roles = [m["role"] for m in transcript["messages"]]
    assert roles[:3] == ["user", "assistant", "tool"] and transcript["messages"][1]["tool_calls"]
    assert roles[-1] == "assistant"


def test_chat_with_tools_asks_on_the_terminal_before_a_call_runs(tmp_path, smollm2_gguf):
    import subprocess

    from tests.cli.helpers import ROOT
    from tests.helpers import require_llama_cpp

    require_llama_cpp()
    env = only_add_server(tmp_path)
    chat = subprocess.run(
        [sys.executable, "-m", "app.cli", "chat", str(smollm2_gguf), "--tools", "tools", "--tool-choice", "tools.add"]
        + ["--temp", "0", "--max-tokens", "48", "--ctx", "2048"],
        input="Add 2 and 3.\ny\n",  # the question, then "y": allow this call once
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert chat.returncode == 0, chat.stderr
    assert "The model wants to call tools.add with" in chat.stderr and "Allow? [y] once" in chat.stderr
    assert "[tools.add: ok, " in chat.stderr or "[tools.add: error" in chat.stderr


def test_a_turn_that_used_none_of_its_tools_says_so_on_stderr_and_in_the_json(capsys):
    """As the chat says under such a reply: the tools' descriptions cost prompt tokens for nothing (issue 46)."""
    import argparse

    from app.cli.tool_run import run_turn, transcript
    from app.core.chat.tool_loop import ToolRun, UnusedTools
    from app.core.engines.base import ChatMessage, SamplingParams

    class Loop:
        def run(self, messages, sampling, servers, tool_choice=None, cancel=None):
            return ToolRun(messages=list(messages), reply="Hi.", unused=UnusedTools(3, 700))

    args = argparse.Namespace(tools="files")
    run = run_turn(Loop(), [ChatMessage(role="user", content="Say hi.")], SamplingParams(), args, None)  # type: ignore[arg-type]
    assert "[3 tools offered (≈700 prompt tokens), none used]" in capsys.readouterr().err
    assert transcript(run) | {"messages": []} == {
        "messages": [],
        "tool_calls": [],
        "reply": "Hi.",
        "hit_step_limit": False,
        "tools_offered": 3,
        "tools_used": 0,
        "tools_prompt_tokens": 700,
    }
