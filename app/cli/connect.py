"""`hearth connect TOOL`: print a tool's configuration for this machine's Hearth server, with the real URL,
key and model, so it can be pasted or piped (`hearth connect codex --part config.toml >> ~/.codex/config.toml`).

Only the configuration goes to stdout; where each part goes and the tool's note go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.library import Library


def add_connect_command(subparsers: Any) -> None:
    from app.core.settings import DEFAULT_SERVER_PORT

    connect = subparsers.add_parser("connect", help="print a tool's configuration for the local API (see --list)")
    connect.add_argument("tool", nargs="?", help="codex, claude-code, continue, … (none: list them)")
    connect.add_argument("--model", help="the model id to name (default: the most recent ready model in the library)")
    connect.add_argument("--key", help="the API key to put in (default: the server's key when it requires one)")
    port_help = f"the server's port (default: Settings → Server, else {DEFAULT_SERVER_PORT})"
    connect.add_argument("--port", type=int, help=port_help)
    connect.add_argument("--part", help="print only this part (its number from 1, or its title, e.g. config.toml)")
    connect.add_argument("--list", action="store_true", help="list the tools and what each one calls")
    connect.set_defaults(handler=cmd_connect)


def cmd_connect(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.connect import (
        KEY_PLACEHOLDER,
        MODEL_PLACEHOLDER,
        TOOL_IDS,
        UnknownTool,
        connect_snippets,
        snippet_for,
    )

    server = ctx.settings.server
    url = f"http://127.0.0.1:{args.port or server.port}/v1"
    if args.list or not args.tool:
        for s in connect_snippets(url):
            sys.stdout.write(f"{s.tool:<18} {s.name:<18} {s.api}\n")
        return 0
    if args.tool not in TOOL_IDS:
        return ctx.fail(UnknownTool(args.tool), 2)
    key = args.key or (server.api_key if server.key_required and server.api_key else "")
    library = ctx.open_library()
    try:
        model, context = _model_and_context(library, args.model, server.jit_context)
    finally:
        library.close()
    snippet = snippet_for(args.tool, url, key, model, context)
    parts = list(snippet.parts)
    if args.part:
        try:
            parts = [snippet.part(int(args.part) - 1 if args.part.isdigit() else args.part)]
        except (IndexError, KeyError):
            titles = ", ".join(f"{i}: {p.title}" for i, p in enumerate(snippet.parts, 1))
            return ctx.fail(f"{snippet.name} has no part {args.part!r}; its parts are {titles}", 2)
    sys.stdout.write("\n\n".join(p.text for p in parts) + "\n")
    sys.stdout.flush()
    for i, p in enumerate(parts, 1):
        sys.stderr.write(f"# {i}. {p.title}: {p.where}\n" if len(parts) > 1 else f"# {p.title}: {p.where}\n")
    sys.stderr.write(f"# {snippet.note}\n")
    if not model:
        sys.stderr.write(f"# No model is ready in the library yet: put a model id in place of {MODEL_PLACEHOLDER}.\n")
    if not key and server.key_required:
        sys.stderr.write("# The server requires a key and has none yet: it makes one when it first starts.\n")
    elif not key:
        sys.stderr.write(f"# No key is required on this computer; {KEY_PLACEHOLDER!r} only fills the field.\n")
    return 0


def _model_and_context(library: Library, wanted: str | None, jit_context: int) -> tuple[str, int | None]:
    """The model id to name and the context a request's JIT load gives it here, planned as `hearth serve`
    and the app plan it (what GET /v1/models reports). `wanted` may be any name the library knows; one it
    does not is used as given, with no context."""
    from app.core.errors import HearthError
    from app.core.runtime.resolve import ModelResolver

    if wanted:
        model = library.find(wanted)
        if model is None or not model.ready:
            return wanted, None
    else:
        ready = library.list(status="ready")  # most recently used or added first, as the Server page picks
        if not ready:
            return "", None
        model = ready[0]
    try:
        return model.name, ModelResolver(library, max_context=jit_context).context_length(model)
    except HearthError:  # a file the planner cannot read: the id still serves, the context stays unknown
        return model.name, None
