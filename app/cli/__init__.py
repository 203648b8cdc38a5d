"""The `hearth` command. With no subcommand it opens the GUI.

One module per command group (hardware, fit, plan, models, loaded, pull, engine, serve, connect, bench, remote,
mcp, docs); each adds its parsers and sets `handler(ctx, args)`, where `ctx` is the command's `CliContext`.
"""

from __future__ import annotations

import argparse

from app import __version__


def build_parser() -> argparse.ArgumentParser:
    from app.cli.bench import add_bench_command
    from app.cli.connect import add_connect_command
    from app.cli.docs import add_docs_command
    from app.cli.doctor import add_doctor_command
    from app.cli.engine import add_engine_commands
    from app.cli.fit import add_fit_command
    from app.cli.hardware import add_hardware_command
    from app.cli.loaded import add_loaded_commands
    from app.cli.mcp import add_mcp_command
    from app.cli.models import add_model_commands
    from app.cli.plan import add_plan_command
    from app.cli.pull import add_pull_command
    from app.cli.remote import add_remote_command
    from app.cli.serve import add_serve_command

    parser = argparse.ArgumentParser(prog="hearth", description="Run open LLMs on your own machine.")
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("gui", help="open the Hearth window (the default)")
    add_hardware_command(sub)
    add_doctor_command(sub)
    add_fit_command(sub)
    add_plan_command(sub)
    add_engine_commands(sub)
    add_model_commands(sub)
    add_loaded_commands(sub)
    add_pull_command(sub)
    add_serve_command(sub)
    add_connect_command(sub)
    add_bench_command(sub)
    add_remote_command(sub)
    add_mcp_command(sub)
    add_docs_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    import sys

    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["--hearth-native-check"]:  # the bundle's canary child (canary.guard.child_command)
        from app.core.engines.llamacpp.check_child import main as check_main

        return check_main()
    if raw[:1] == ["--hearth-parse-document"]:  # the bundle's document reader (documents.parse_child.child_command)
        from app.core.documents.parse_child import main as parse_main

        return parse_main(raw[1:2])
    if raw[:1] == ["--hearth-quant-probe"]:  # the bundle's quant-speed probe (quant_probe.child_command)
        from app.core.bench.quant_probe_child import main as probe_main

        return probe_main(["quant-probe", *raw[1:2]])
    args = build_parser().parse_args(argv)
    if args.command in (None, "gui"):
        from app.main import main as gui_main

        return gui_main(exit_process=argv is None)  # the program itself: it ends without the teardown
    from app.cli.context import CliContext
    from app.core.logs import configure_logging

    ctx = CliContext(args.command)
    configure_logging(ctx.paths.logs, console=True)
    return args.handler(ctx, args)
