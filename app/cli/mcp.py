"""`hearth mcp ls [--json]`, `hearth mcp call SERVER TOOL JSON`, `hearth mcp import [FILE]`: the MCP servers
in Hearth's `mcp.json` (the `{"mcpServers": …}` format of LM Studio, Cursor and Claude Desktop)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.mcp.servers import McpServers, ServerState


def add_mcp_command(subparsers: Any) -> None:
    mcp = subparsers.add_parser("mcp", help="the MCP servers whose tools models can call")
    sub = mcp.add_subparsers(dest="mcp_command", required=True)
    ls = sub.add_parser("ls", help="start each server and list its state and tools")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)
    call = sub.add_parser("call", help="call one tool and print its result")
    call.add_argument("server")
    call.add_argument("tool")
    call.add_argument("arguments", nargs="?", default="{}", help="the arguments as a JSON object, e.g. '{\"a\": 1}'")
    call.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the result (default 120)")
    call.add_argument("--json", action="store_true", help="print the result as JSON")
    call.set_defaults(handler=cmd_call)
    imp = sub.add_parser("import", help="add the servers of another program's MCP file (LM Studio, Claude Desktop)")
    imp.add_argument(
        "file", nargs="?", type=Path, help="the file; without it, the ones found on this machine are listed"
    )
    imp.add_argument("--replace", action="store_true", help="replace servers of the same name")
    imp.set_defaults(handler=cmd_import)


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def open_servers(ctx: CliContext) -> McpServers:
    from app.core.mcp.servers import McpServers

    return McpServers(ctx.paths.config, log_dir=ctx.paths.logs)


def _started(servers: McpServers) -> list[ServerState]:
    """Every server started at once; each one's state, failed ones included."""
    futures = [(s.name, servers.start(s.name)) for s in servers.states()]
    for _name, future in futures:
        try:
            future.result(servers.start_timeout_s + 5)
        except Exception:  # its state says why
            pass
    return servers.states()


def cmd_ls(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.errors import HearthError

    try:
        servers = open_servers(ctx)
    except HearthError as exc:
        return ctx.fail(exc)
    try:
        states = _started(servers)
    finally:
        servers.close()
    if args.json:
        _out(json.dumps([_state_json(s) for s in states], indent=2))
        return 0
    if not states:
        _out(f"No MCP servers yet. Add them to {servers.config_path}, or: hearth mcp import FILE")
        return 0
    for state in states:
        _out(f"{state.name}: {state.line}")
        _out(f"  runs: {state.command}")
        for tool in state.tools:
            summary = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
            _out(f"  - {tool.name}" + (f": {summary}" if summary else ""))
    return 0


def _state_json(state: ServerState) -> dict[str, Any]:
    return {
        "name": state.name,
        "status": state.status,
        "error": state.error or None,
        "command": state.command,
        "tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in state.tools],
    }


def cmd_call(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.errors import HearthError

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        return ctx.fail(f"the arguments are not JSON: {exc}", 2)
    if not isinstance(arguments, dict):
        return ctx.fail("the arguments must be a JSON object", 2)
    if args.timeout <= 0:
        return ctx.fail("--timeout must be more than 0 seconds", 2)
    try:
        servers = open_servers(ctx)
    except HearthError as exc:
        return ctx.fail(exc)
    try:
        result = servers.call(args.server, args.tool, arguments, args.timeout).result(args.timeout + 60)
    except HearthError as exc:
        return ctx.fail(exc)
    finally:
        servers.close()
    if args.json:
        _out(json.dumps({"text": result.text, "is_error": result.is_error, "truncated": result.truncated}))
    else:
        _out(result.text)
    return 1 if result.is_error else 0


def cmd_import(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.mcp.config import McpConfigError, known_config_files
    from app.core.mcp.importing import import_servers
    from app.core.mcp.secrets import SecretStore

    if args.file is None:
        found = known_config_files()
        if not found:
            _out("No MCP files of LM Studio, Claude Desktop or Cursor were found. Give one: hearth mcp import FILE")
            return 0
        for program, path in found:
            _out(f"{program}: {path}   (hearth mcp import '{path}')")
        return 0
    secrets = SecretStore.for_config(ctx.paths.config)
    try:
        done = import_servers(ctx.paths.config, args.file, secrets, replace=args.replace)
    except McpConfigError as exc:
        return ctx.fail(exc)
    for name, entry in done.added.items():
        _out(f"Added {name}: it will run {entry.command_line()}")
    if done.kept:
        _out(f"Kept the servers already here: {', '.join(done.kept)} (--replace replaces them)")
    if done.secrets_moved:
        _out(f"Their secrets are kept in {done.secrets_where}, not in mcp.json.")
    return 0
