"""The `hearth` command. With no subcommand it opens the GUI."""

from __future__ import annotations

import argparse
import json
import sys

from app import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hearth", description="Run open LLMs on your own machine.")
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("gui", help="open the Hearth window (the default)")
    hw = sub.add_parser("hw", help="show this machine's hardware")
    hw.add_argument("--json", action="store_true", help="print the profile as JSON")
    hw.add_argument("--refresh-bandwidth", action="store_true", help="measure memory bandwidth again")
    hw.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth measurement")
    fit = sub.add_parser("fit", help="which variant of a model fits this machine, and how fast it runs")
    fit.add_argument("model", help="a Hub repo (owner/name), a GGUF file, or a folder of models")
    fit.add_argument("--ctx", type=int, default=8192, help="target context length (default 8192)")
    from app.core.models.memory import KV_CACHE_TYPES

    fit.add_argument("--kv", choices=KV_CACHE_TYPES, default="f16", help="KV cache type")
    fit.add_argument("--flash-attn", action="store_true", help="plan with flash attention")
    fit.add_argument("--no-mmap", action="store_true", help="plan a load without mmap")
    fit.add_argument("--cpu-only", action="store_true", help="ignore GPUs")
    fit.add_argument("--json", action="store_true", help="print the assessment as JSON")
    fit.set_defaults(handler=cmd_fit)
    hw.set_defaults(handler=cmd_hw)
    from app.cli_engine import add_engine_commands
    from app.cli_models import add_model_commands
    from app.cli_pull import add_pull_command

    add_engine_commands(sub)
    add_model_commands(sub)
    add_pull_command(sub)
    return parser


def cmd_hw(args: argparse.Namespace) -> int:
    from app.core.hardware import probe_hardware
    from app.core.hardware.report import format_profile
    from app.core.paths import app_paths

    paths = app_paths().ensure()
    profile = probe_hardware(
        cache_dir=paths.cache,
        measure_bandwidth=not args.no_bandwidth,
        refresh_bandwidth=args.refresh_bandwidth,
    )
    if args.json:
        json.dump(profile.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_profile(profile) + "\n")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.core.errors import HearthError
    from app.core.hardware import probe_hardware
    from app.core.models.calibration import CalibrationStore
    from app.core.models.devices import machine_from_profile
    from app.core.models.fit_report import format_recommendation, recommendation_json
    from app.core.models.memory import LoadOptions
    from app.core.models.recommend import assess
    from app.core.paths import app_paths

    paths = app_paths().ensure()
    try:
        if Path(args.model).expanduser().exists():
            from app.core.models.local_variants import variants_from_path

            variants = variants_from_path(args.model)
        else:
            import os

            from app.core.hub.client import HubClient
            from app.core.hub.metadata import assessable_variants
            from app.core.settings import SettingsStore

            settings = SettingsStore(paths.settings_file).load()
            variants = assessable_variants(HubClient.from_settings(settings, env=os.environ), args.model)
    except HearthError as exc:
        sys.stderr.write(f"hearth fit: {exc}\n")
        return 1
    machine = machine_from_profile(probe_hardware(cache_dir=paths.cache), prefer_gpu=not args.cpu_only)
    options = LoadOptions(n_ctx=args.ctx, cache_type_k=args.kv, cache_type_v=args.kv,
                          flash_attn=args.flash_attn or args.kv != "f16", use_mmap=not args.no_mmap)
    rec = assess(variants, machine, n_ctx=args.ctx, options=options,
                 calibration=CalibrationStore(paths.calibration_file))
    if args.json:
        json.dump(recommendation_json(rec), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_recommendation(rec, f"{args.model} on this machine ({machine.backend}):") + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in (None, "gui"):
        from app.main import main as gui_main

        return gui_main()
    from app.core.logs import configure_logging
    from app.core.paths import app_paths

    configure_logging(app_paths().logs, console=True)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
