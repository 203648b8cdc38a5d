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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in (None, "gui"):
        from app.main import main as gui_main

        return gui_main()
    if args.command == "hw":
        from app.core.logs import configure_logging
        from app.core.paths import app_paths

        configure_logging(app_paths().logs, console=True)
        return cmd_hw(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
