"""`hearth hw`: this machine's hardware, as a table or the JSON profile the planner consumes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cli.context import CliContext


def add_hardware_command(subparsers: argparse._SubParsersAction) -> None:
    """Add `hw`; its parser's `handler` default is the function to call with (ctx, args)."""
    hw = subparsers.add_parser("hw", help="show this machine's hardware")
    hw.add_argument("--json", action="store_true", help="print the profile as JSON")
    hw.add_argument("--refresh-bandwidth", action="store_true", help="measure memory bandwidth again")
    hw.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth measurement")
    hw.add_argument(
        "--refresh-quant-speeds",
        action="store_true",
        help="measure this CPU's decode rate per weight type and per-layer cost again (about half a minute)",
    )
    hw.set_defaults(handler=cmd_hw)


def cmd_hw(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.hardware import probe_hardware
    from app.core.hardware.report import format_profile

    profile = probe_hardware(
        cache_dir=ctx.paths.cache,
        measure_bandwidth=not args.no_bandwidth,
        refresh_bandwidth=args.refresh_bandwidth,
    )
    if args.refresh_quant_speeds:
        from app.core.bench.quant_probe import describe, measure_quant_speeds

        speeds = measure_quant_speeds(ctx.paths.cache, refresh=True)
        if speeds is None:
            sys.stderr.write("could not measure the per-type speeds here; predictions use the shipped table\n")
        else:
            sys.stderr.write(f"decode read rate per weight type here: {describe(speeds)}\n")
    if args.json:
        json.dump(profile.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_profile(profile) + "\n")
    return 0
