"""`hearth fit MODEL`: which variant of a model fits this machine, and how fast it runs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cli.context import CliContext


def add_fit_command(subparsers: argparse._SubParsersAction) -> None:
    """Add `fit`; its parser's `handler` default is the function to call with (ctx, args)."""
    from app.core.models.memory import KV_CACHE_TYPES

    fit = subparsers.add_parser("fit", help="which variant of a model fits this machine, and how fast it runs")
    fit.add_argument("model", help="a Hub repo (owner/name), a GGUF file, or a folder of models")
    fit.add_argument("--ctx", type=int, default=8192, help="target context length (default 8192)")
    fit.add_argument("--kv", choices=KV_CACHE_TYPES, default="f16", help="KV cache type")
    fit.add_argument("--flash-attn", action="store_true", help="plan with flash attention")
    fit.add_argument("--no-mmap", action="store_true", help="plan a load without mmap")
    fit.add_argument("--cpu-only", action="store_true", help="ignore GPUs")
    fit.add_argument("--json", action="store_true", help="print the assessment as JSON")
    fit.set_defaults(handler=cmd_fit)


def cmd_fit(ctx: CliContext, args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.errors import HearthError
    from app.core.hardware import probe_hardware
    from app.core.models.devices import machine_from_profile
    from app.core.models.fit_report import format_recommendation, recommendation_json
    from app.core.models.memory import LoadOptions
    from app.core.models.recommend import assess

    try:
        if Path(args.model).expanduser().exists():
            from app.core.models.local_variants import variants_from_path

            variants = variants_from_path(args.model)
        else:
            variants = ctx.hub_variants(args.model)
    except HearthError as exc:
        return ctx.fail(exc)
    machine = machine_from_profile(probe_hardware(cache_dir=ctx.paths.cache), prefer_gpu=not args.cpu_only)
    options = LoadOptions(
        n_ctx=args.ctx,
        cache_type_k=args.kv,
        cache_type_v=args.kv,
        flash_attn=args.flash_attn or args.kv != "f16",
        use_mmap=not args.no_mmap,
    )
    rec = assess(variants, machine, n_ctx=args.ctx, options=options, calibration=ctx.calibration)
    if args.json:
        json.dump(recommendation_json(rec), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_recommendation(rec, f"{args.model} on this machine ({machine.backend}):") + "\n")
    return 0
