"""`hearth remote add URL`, `hearth remote ls`, `hearth remote rm NAME` (and `refresh`): OpenAI-compatible
servers elsewhere, whose models `hearth run` / `hearth chat` take as `NAME/MODEL-ID`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.engines.remote import Remote, RemoteStore


def add_remote_command(subparsers: Any) -> None:
    remote = subparsers.add_parser("remote", help="connect to model servers elsewhere (vLLM, llama-server, …)")
    sub = remote.add_subparsers(dest="remote_command", required=True)
    add = sub.add_parser("add", help="probe a server and save it as a remote")
    add.add_argument("url", help="the server's base URL, e.g. http://gpu-box:8000 (a trailing /v1 is fine)")
    add.add_argument("--name", help="what to call it (default: the URL's host)")
    add.add_argument("--api-key", help="the server's API key; '-' reads it from standard input")
    add.add_argument("--expose", action="store_true", help="serve its models on Hearth's local endpoint too")
    add.add_argument("--read-timeout", type=float, default=120.0, help="seconds a reply may stall (default 120)")
    add.set_defaults(handler=cmd_add)
    ls = sub.add_parser("ls", help="list the remotes and their models")
    ls.set_defaults(handler=cmd_ls)
    rm = sub.add_parser("rm", help="forget a remote (and its key)")
    rm.add_argument("name")
    rm.set_defaults(handler=cmd_rm)
    refresh = sub.add_parser("refresh", help="probe a remote again for its models")
    refresh.add_argument("name")
    refresh.set_defaults(handler=cmd_refresh)


def open_store(ctx: CliContext) -> RemoteStore:
    from app.core.engines.remote import open_remotes

    return open_remotes(ctx.paths)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _models(remote: Remote) -> list[str]:
    from app.core.engines.remote import remote_id

    return [
        f"  {remote_id(remote.name, m.id)}" + (f"  (context {m.context_length:,})" if m.context_length else "")
        for m in remote.models
    ]


def cmd_add(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.errors import HearthError

    key = args.api_key
    if key == "-":
        key = sys.stdin.readline().strip()
    if args.read_timeout <= 0:
        return ctx.fail("--read-timeout must be more than 0 seconds", 2)
    store = open_store(ctx)
    try:
        remote = store.add(
            args.url, name=args.name, api_key=key or None, expose_locally=args.expose, read_timeout_s=args.read_timeout
        )
    except HearthError as exc:
        return ctx.fail(exc)
    version = f" {remote.version}" if remote.version else ""
    _out(f"Added {remote.name}: {remote.kind_name}{version} at {remote.url}, {len(remote.models)} model(s)")
    for line in _models(remote):
        _out(line)
    if remote.has_key:
        _out(
            f"The key is kept in the {'OS keyring' if store.key_storage == 'keyring' else 'remotes file (owner-only)'}."
        )
    if remote.expose_locally:
        _out("Its models are served on the local endpoint too.")
    return 0


def cmd_ls(ctx: CliContext, args: argparse.Namespace) -> int:
    remotes = open_store(ctx).list()
    if not remotes:
        _out("No remotes. Add one with `hearth remote add URL`.")
        return 0
    for remote in remotes:
        flags = [remote.kind_name]
        if remote.expose_locally:
            flags.append("exposed locally")
        if remote.has_key:
            flags.append("key set")
        if remote.error:
            flags.append("UNREACHABLE at the last probe")
        _out(f"{remote.name}  {remote.url}  ({', '.join(flags)})")
        if remote.error:
            _out(f"  {remote.error}")
        for line in _models(remote):
            _out(line)
    return 0


def cmd_rm(ctx: CliContext, args: argparse.Namespace) -> int:
    if not open_store(ctx).remove(args.name):
        return ctx.fail(f"there is no remote named {args.name!r} (see `hearth remote ls`)")
    _out(f"Removed {args.name}.")
    return 0


def cmd_refresh(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.errors import HearthError

    try:
        remote = open_store(ctx).refresh(args.name)
    except HearthError as exc:
        return ctx.fail(exc)
    if remote.error:
        return ctx.fail(remote.error)
    _out(f"{remote.name}: {remote.kind_name}, {len(remote.models)} model(s)")
    for line in _models(remote):
        _out(line)
    return 0
