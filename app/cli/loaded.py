"""`hearth ps`, `hearth load`, `hearth unload`: the models a running Hearth (the app or `hearth serve`) has
loaded, managed through its API's model routes (GET /models, POST /models/load and /models/unload)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext

LOAD_TIMEOUT_S = 600.0  # a large model from a slow disk; the server answers when the load is done


def add_loaded_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add `ps`, `load` and `unload`; each parser's `handler` default is the function to call with (ctx, args)."""
    port_help = "the server's port (default: Settings → Server)"
    ps = subparsers.add_parser("ps", help="the models a running Hearth has loaded")
    ps.add_argument("--port", type=int, help=port_help)
    ps.set_defaults(handler=cmd_ps)
    load = subparsers.add_parser(
        "load", help="load a library model in a running Hearth, beside those loaded (room made if it must)"
    )
    load.add_argument("model", help="a library name (see `hearth ls`)")
    load.add_argument(
        "--ttl",
        type=int,
        metavar="S",
        help="unload it after S seconds without a request; -1: never (default: Settings → Server)",
    )
    load.add_argument("--pin", action="store_true", help="keep it loaded: never unloaded to make room for another")
    load.add_argument("--port", type=int, help=port_help)
    load.set_defaults(handler=cmd_load)
    unload = subparsers.add_parser("unload", help="unload a model from a running Hearth")
    unload.add_argument("model", nargs="?", help="a loaded model's name (see `hearth ps`)")
    unload.add_argument("--all", action="store_true", help="every loaded model")
    unload.add_argument(
        "--unpin", action="store_true", help="unpin a pinned model first (no request unloads a pinned model)"
    )
    unload.add_argument("--port", type=int, help=port_help)
    unload.set_defaults(handler=cmd_unload)


class ServerUnreachable(Exception):
    pass


def _call(ctx: CliContext, args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """The JSON answer of the local server; ServerUnreachable when none answers, RuntimeError with the
    server's own message for an error status."""
    import httpx

    server = ctx.settings.server
    base = f"http://127.0.0.1:{args.port or server.port}"
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=LOAD_TIMEOUT_S, trust_env=False) as client:
            r = client.request(method, path, json=body)
    except httpx.TransportError as exc:
        raise ServerUnreachable(
            f"no Hearth server answers on {base} ({exc.__class__.__name__}); open the app with its server on, or "
            "run `hearth serve`"
        ) from exc
    try:
        answer = r.json()
    except ValueError:
        answer = {}
    if r.status_code >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise RuntimeError(message or f"the server answered {r.status_code}")
    return answer


def _loaded(ctx: CliContext, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The server's loaded models, as GET /models lists them (with their status)."""
    data = _call(ctx, args, "GET", "/models").get("data", [])
    return [m for m in data if m.get("status", {}).get("value") in ("loaded", "loading")]


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return "-"
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def _until(status: dict[str, Any]) -> str:
    """What `hearth ps` says of when a model goes: Ollama's UNTIL column, in words."""
    if status.get("value") == "loading":
        return "loading"
    if status.get("pinned"):
        return "pinned"
    left, ttl = status.get("idle_left_s"), status.get("ttl_s")
    if ttl is None:
        return "forever"
    if left is None:
        return f"{_duration(ttl)} after use" if not status.get("busy") else "busy"
    return f"in {_duration(left)}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def cmd_ps(ctx: CliContext, args: argparse.Namespace) -> int:
    try:
        loaded = _loaded(ctx, args)
    except (ServerUnreachable, RuntimeError) as exc:
        return ctx.fail(exc)
    if not loaded:
        sys.stdout.write("No model is loaded.\n")
        return 0
    rows = [("NAME", "MEMORY", "CONTEXT", "UNTIL")]
    for m in loaded:
        status = m.get("status", {})
        context = status.get("context_length")
        rows.append((m["id"], _size(status.get("memory_bytes")), f"{context:,}" if context else "-", _until(status)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        sys.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
    return 0


def cmd_load(ctx: CliContext, args: argparse.Namespace) -> int:
    try:
        body: dict[str, Any] = {"model": args.model}
        if args.ttl is not None:
            body["ttl"] = max(-1, args.ttl)
        if args.pin:
            body["pin"] = True
        _call(ctx, args, "POST", "/models/load", body)
    except (ServerUnreachable, RuntimeError) as exc:
        return ctx.fail(exc)
    sys.stdout.write(f"Loaded {args.model}.\n")
    return 0


def cmd_unload(ctx: CliContext, args: argparse.Namespace) -> int:
    if bool(args.model) == bool(args.all):
        return ctx.fail("name one loaded model, or --all", 2)
    try:
        loaded = _loaded(ctx, args) if args.all or args.unpin else []
        names = [m["id"] for m in loaded] if args.all else [args.model]
        pinned = {m["id"] for m in loaded if m["status"].get("pinned")}
        for name in names:
            if args.unpin and name in pinned:  # only a loaded model: a load call would load one that is not
                _call(ctx, args, "POST", "/models/load", {"model": name, "pin": False})
            _call(ctx, args, "POST", "/models/unload", {"model": name})
            sys.stdout.write(f"Unloaded {name}.\n")
    except (ServerUnreachable, RuntimeError) as exc:
        return ctx.fail(exc)
    if not names:
        sys.stdout.write("No model is loaded.\n")
    return 0
