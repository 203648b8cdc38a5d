"""`hearth doctor`: whether the installed llama.cpp suits this machine, what the native check turned off and
why, and the command that fixes a mismatch."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.cli.context import CliContext


def add_doctor_command(subparsers: argparse._SubParsersAction) -> None:
    doctor = subparsers.add_parser("doctor", help="check that llama.cpp's build suits this machine")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--reset",
        action="store_true",
        help="forget what the native check learned for this build (it checks again on the next load)",
    )
    doctor.set_defaults(handler=cmd_doctor)


def cmd_doctor(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.engines.llamacpp.canary import recover_native_crashes
    from app.core.hardware import probe_hardware
    from app.core.runtime.doctor import diagnose_this_machine, format_report

    for note in recover_native_crashes():
        sys.stderr.write(f"note: {note}\n")
    if args.reset:
        forgotten = _reset()
        sys.stderr.write(f"forgot {forgotten} native check result{'s' if forgotten != 1 else ''}\n")
    profile = probe_hardware(cache_dir=ctx.paths.cache, measure_bandwidth=False)
    report = diagnose_this_machine(profile)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(report) + "\n")
    return 0 if report.ok else 1


def _reset() -> int:
    from app.core.hardware.native_checks import NativeCheckStore, default_store_path, fingerprint_of
    from app.core.native import import_native

    store = NativeCheckStore(default_store_path())
    try:
        return store.forget(fingerprint_of(import_native("llama_cpp")))
    except Exception:  # no usable llama.cpp: forget every build's results
        return store.forget()
