"""`--tools` on `hearth run` and `hearth chat`: the model may call the named MCP servers' tools, each call asked
about in the terminal first (or allowed with `--yes`); `--json` prints the whole transcript."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.chat.tool_loop import Approval, PendingCall, ToolLoop, ToolRun, ToolStep
    from app.core.chat.turn import ChatTurn
    from app.core.engines.base import ChatMessage, SamplingParams
    from app.core.runtime.engine_host import EngineHost


WAIT_SLICE_S = 0.2  # how often the waiting main thread looks up (Python runs Ctrl-C's handler between waits)


def add_tool_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tools", metavar="SERVER[,SERVER]", help="let the model call these MCP servers' tools")
    p.add_argument(
        "--tool-choice",
        default="auto",
        metavar="auto|required|SERVER.TOOL",
        help="auto (default): the model decides; required: it must call one first; or the one tool it must call",
    )
    p.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    p.add_argument("--json", action="store_true", help="print the whole transcript as JSON (messages, calls, results)")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def tool_choice(value: str) -> str | dict[str, Any]:
    """The plan's tool_choice for --tool-choice: auto, required, or SERVER.TOOL as its function."""
    from app.core.chat.tool_loop import function_name

    if value in ("auto", "required", "none"):
        return value
    server, dot, tool = value.partition(".")
    if not dot or not server or not tool:
        raise ValueError(f"--tool-choice {value!r}: give auto, required or SERVER.TOOL")
    return {"type": "function", "function": {"name": function_name(server, tool)}}


def terminal_approval(call: PendingCall) -> Approval:
    """Ask on the terminal: once (y), always for this tool (a), or deny (n, or end of input)."""
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    shown = arguments if len(arguments) <= 400 else arguments[:400] + "…"
    while True:
        _err(f"\nThe model wants to call {call.server}.{call.tool} with {shown}")
        sys.stderr.write("Allow? [y] once, [a] always for this tool, [n] deny: ")
        sys.stderr.flush()
        try:
            answer = input().strip().lower()
        except EOFError:
            return "deny"
        if answer in ("y", "yes"):
            return "once"
        if answer in ("a", "always"):
            return "always"
        if answer in ("n", "no", ""):
            return "deny"


def open_loop(ctx: CliContext, host: EngineHost, args: argparse.Namespace) -> ToolLoop:
    from app.core.chat.tool_loop import ToolLoop
    from app.core.mcp.servers import McpServers

    def report(step: ToolStep) -> None:
        """Loop thread: each call's outcome, on stderr (stdout carries the reply)."""
        if step.result is not None:
            mark = "error" if step.result.is_error else "ok"
            _err(f"[{step.call.server}.{step.call.tool}: {mark}, {len(step.result.text):,} characters]")
        else:
            _err(f"[{step.call.server}.{step.call.tool}: {step.error}]")

    servers = McpServers(ctx.paths.config, log_dir=ctx.paths.logs)
    approve = (lambda _call: "always") if args.yes else terminal_approval
    return ToolLoop(host, servers, approve, max_steps=ctx.settings.tool_steps, source="cli", on_step=report)


def server_names(args: argparse.Namespace) -> list[str]:
    return [n.strip() for n in (args.tools or "").split(",") if n.strip()]


def run_turn(
    loop: ToolLoop, messages: list[ChatMessage], sampling: SamplingParams, args: argparse.Namespace, choice: Any
) -> ToolRun:
    """One user turn with tools, run as the chat window runs one (a ChatTurn), kept by the caller rather than
    saved (the model's own turns are not streamed: they hold its calls' markup; each call's outcome goes to
    stderr). Ctrl-C stops the model or the running tool; the loop's failure is raised here."""
    from concurrent.futures import ThreadPoolExecutor

    from app.core.chat.turn import ChatTurn, TurnTools
    from app.core.engines.base import GenerateRequest

    # On a worker: the main thread stays free to take Ctrl-C, which stops the loop where it is.
    with ThreadPoolExecutor(1, thread_name_prefix="tool-loop") as pool:
        tools = TurnTools(loop, server_names(args), pool, choice)
        turn = ChatTurn(None, GenerateRequest(messages=messages, sampling=sampling), tools=tools, source="cli")
        turn.start()
        wait_out(turn, lambda: _err("\n(stopping…)"))
    if turn.failure is not None:
        raise turn.failure
    run = turn.run
    assert run is not None
    if run.unused is not None:  # as the chat says under a reply: the tools cost prompt tokens for nothing
        _err(f"[{run.unused.line}]")
    return run


def wait_out(turn: ChatTurn, stopping: Callable[[], None] | None = None) -> bool:
    """Main thread: wait for the turn to end; Ctrl-C stops it (its text so far is kept) and is waited out, and
    another only asks again. True when it was stopped so; `stopping()` says so as it happens."""
    interrupted = False
    while True:
        try:
            if turn.wait(WAIT_SLICE_S):
                return interrupted
        except KeyboardInterrupt:
            interrupted = True
            turn.stop()
            if stopping is not None:
                stopping()


def checked_choice(ctx: CliContext, args: argparse.Namespace) -> tuple[str | dict[str, Any] | None, str]:
    """--tools' choice and '' (None when --tools is not given), or why they cannot be used; read before the
    model loads."""
    if args.tools is None:
        return None, ""
    try:
        choice = tool_choice(args.tool_choice)
    except ValueError as exc:
        return None, str(exc)
    return choice, check_servers(ctx, args)


def check_servers(ctx: CliContext, args: argparse.Namespace) -> str:
    """Why --tools cannot be used ('' when it can): a server not in mcp.json. Read before the model loads."""
    from app.core.mcp.config import CONFIG_NAME, McpConfigError, load_config

    try:
        known = load_config(ctx.paths.config / CONFIG_NAME).servers
    except McpConfigError as exc:
        return str(exc)
    missing = [n for n in server_names(args) if n not in known]
    if not server_names(args):
        return "--tools needs at least one server name (see `hearth mcp ls`)"
    return f"no MCP server named {', '.join(missing)} (see `hearth mcp ls`)" if missing else ""


def transcript(run: ToolRun) -> dict[str, Any]:
    def message(m: ChatMessage) -> dict[str, Any]:
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
        if m.tool_call_id:
            out["tool_call_id"] = m.tool_call_id
        return out

    steps = [
        {
            "server": s.call.server,
            "tool": s.call.tool,
            "arguments": s.call.arguments,
            "result": s.result.text if s.result is not None else None,
            "is_error": s.result.is_error if s.result is not None else True,
            "error": s.error or None,
        }
        for s in run.steps
    ]
    return {
        "messages": [message(m) for m in run.messages],
        "tool_calls": steps,
        "reply": run.reply,
        "hit_step_limit": run.hit_limit,
        **(run.unused.as_stats() if run.unused is not None else {}),
    }
