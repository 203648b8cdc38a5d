"""`hearth plan MODEL --gpu h100 --gpus 2 --users 16 --ctx 32768`: a server for a model that will not fit
here: the GPUs and layout it takes, the engine and its launch command, and the decode speed to expect."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cli.context import CliContext


def add_plan_command(subparsers: argparse._SubParsersAction) -> None:
    """Add `plan`; its parser's `handler` default is the function to call with (ctx, args)."""
    from app.core.deploy.engines import ENGINES
    from app.core.deploy.plan import DTYPES
    from app.core.deploy.targets import all_targets

    targets = ", ".join(t.id for t in all_targets())
    plan = subparsers.add_parser("plan", help="plan a server (GPUs, engine, command, speed) for a model")
    plan.add_argument("model", help="a Hub repo (owner/name), a GGUF file, or a folder holding a config.json")
    plan.add_argument("--gpu", required=True, help=f"the target GPU type: {targets}")
    plan.add_argument("--gpus", type=int, default=1, help="how many of them there are (default 1)")
    plan.add_argument("--users", type=int, default=1, help="concurrent users, each with the full context (default 1)")
    plan.add_argument("--ctx", type=int, default=8192, help="context length per user (default 8192)")
    plan.add_argument(
        "--dtype", default="auto", help=f"weight format: {', '.join(DTYPES)}, or a GGUF quant of a GGUF repo"
    )
    plan.add_argument("--engine", choices=ENGINES, help="plan this engine instead of the recommended one")
    plan.add_argument(
        "--shared-prefix", action="store_true", help="requests share a long prefix (agents, one big system prompt)"
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler=cmd_plan)


def cmd_plan(ctx: CliContext, args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.deploy.plan import make_plan
    from app.core.deploy.report import format_plan, plan_json
    from app.core.deploy.shape import shape_from_hub, shape_from_path
    from app.core.deploy.targets import find_target
    from app.core.errors import HearthError

    try:
        target = find_target(args.gpu)
        if Path(args.model).expanduser().exists():
            shape = shape_from_path(args.model)
        else:
            shape = shape_from_hub(ctx.hub, args.model)
        plan = make_plan(
            shape,
            target,
            gpus=args.gpus,
            users=args.users,
            ctx=args.ctx,
            dtype=args.dtype,
            engine=args.engine,
            shared_prefix=args.shared_prefix,
        )
    except HearthError as exc:
        return ctx.fail(exc)
    if args.json:
        json.dump(plan_json(plan), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_plan(plan) + "\n")
    # A plan that does not fit is an answer, not a failure of the command; its exit status says which.
    return 0 if plan.fits else 3
