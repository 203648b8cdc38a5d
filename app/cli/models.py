"""`hearth search`, `hearth ls`, `hearth rm`, `hearth import`: the Hub and the local library from a terminal."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.core.formats import EXL2, GGUF, MLX

if TYPE_CHECKING:
    from app.cli.context import CliContext


def add_model_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add `search`, `ls` and `rm`; each parser's `handler` default is the function to call with (ctx, args)."""
    search = subparsers.add_parser("search", help="search the Hugging Face Hub for models")
    search.add_argument("text", nargs="?", default="", help="words in the model id")
    search.add_argument(
        "--format", choices=[GGUF.value, MLX.value, EXL2.value], default=GGUF.value, help="model format (gguf)"
    )
    search.add_argument("--sort", choices=["downloads", "likes", "trending", "updated"], default="downloads")
    search.add_argument("--limit", type=int, default=20, help="how many results (default 20)")
    search.add_argument("--author", help="only models from this user or organisation")
    search.set_defaults(handler=cmd_search)
    ls = subparsers.add_parser("ls", help="list the models in your library")
    ls.set_defaults(handler=cmd_ls)
    rm = subparsers.add_parser("rm", help="remove a model from your library (and its files in the models folder)")
    rm.add_argument("model", help="name, repo:QUANT, path or id (see `hearth ls`)")
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--keep-files", action="store_true", help="forget the model but keep its files")
    rm.set_defaults(handler=cmd_rm)
    imp = subparsers.add_parser(
        "import",
        help="add models already on this machine to your library, in place (nothing is copied)",
        description="A GGUF file, an MLX folder, or a folder: every model in it (an mmproj file beside a GGUF "
        "model that fits it is kept as its companion). --hf-cache, --lmstudio and --ollama import what those tools "
        "downloaded (Ollama's models by their NAME:TAG, from OLLAMA_MODELS or ~/.ollama/models).",
    )
    imp.add_argument("paths", nargs="*", metavar="PATH", help="a GGUF file, an MLX folder or a folder of models")
    imp.add_argument("--hf-cache", action="store_true", help="every model in the Hugging Face cache")
    imp.add_argument("--lmstudio", action="store_true", help="every model LM Studio downloaded")
    imp.add_argument("--ollama", action="store_true", help="every model Ollama pulled, named NAME:TAG")
    imp.set_defaults(handler=cmd_import)


MODEL_COMMANDS = ("search", "ls", "rm", "import")


def _table(headers: Sequence[str], rows: list[Sequence[str]], right: Sequence[int] = ()) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        out = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def cmd_search(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.hub.errors import HubError
    from app.core.units import fmt_ago, fmt_count

    try:
        page = ctx.hub.search(
            args.text, author=args.author, formats=(args.format,), sort=args.sort, limit=max(1, args.limit)
        )
    except HubError as exc:
        return ctx.fail(exc)
    results = page.results[: max(1, args.limit)]
    if not results:
        sys.stdout.write(f"No {args.format.upper()} models match {args.text!r}.\n")
        return 0
    rows = [[r.id, fmt_count(r.downloads), fmt_count(r.likes), fmt_ago(r.last_modified)] for r in results]
    sys.stdout.write(_table(["MODEL", "DOWNLOADS", "LIKES", "UPDATED"], rows, right=(1, 2)) + "\n")
    return 0


def cmd_ls(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.units import fmt_ago, fmt_bytes

    library = ctx.open_library()
    try:
        models = library.refresh()
    finally:
        library.close()
    if not models:
        sys.stdout.write("No models yet. Find one with `hearth search`, or import a GGUF file in the app.\n")
        return 0
    rows = []
    for m in models:
        name = m.name if m.ready else f"{m.name} [{m.status}]"
        rows.append([name, m.format, m.quant or "-", fmt_bytes(m.size), str(m.path), fmt_ago(m.last_used_at)])
    sys.stdout.write(_table(["NAME", "FORMAT", "QUANT", "SIZE", "PATH", "LAST USED"], rows, right=(3,)) + "\n")
    total = sum(m.size for m in models)
    sys.stdout.write(f"\n{len(models)} model{'s' if len(models) != 1 else ''}, {fmt_bytes(total)} in total\n")
    return 0


def cmd_rm(ctx: CliContext, args: argparse.Namespace, ask: Callable[[str], str] = input) -> int:
    from app.core.units import fmt_bytes

    library = ctx.open_library()
    try:
        model = library.find(args.model)
        if model is None:
            return ctx.fail(f"no model {args.model!r} in the library (see `hearth ls`)")
        inside = [f for f in model.files if f.path.is_relative_to(library.models_dir)]
        what = "delete its files" if inside and not args.keep_files else "keep its files (imported in place)"
        if not args.yes:
            try:
                answer = ask(f"Remove {model.name} ({fmt_bytes(model.size)}) and {what}? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                sys.stdout.write("Nothing removed.\n")
                return 1
        freed = library.delete(model.id, delete_files=not args.keep_files)
    finally:
        library.close()
    sys.stdout.write(f"Removed {model.name}; freed {fmt_bytes(freed)} ({freed} bytes).\n")
    return 0


def cmd_import(ctx: CliContext, args: argparse.Namespace) -> int:
    """Exit 0 when anything was imported (skipped files are listed with why), 1 when nothing was, 2 when
    nothing was asked for."""
    from app.core.library import ImportResult, import_hf_cache, import_lmstudio, import_ollama, import_path
    from app.core.models.errors import ModelFileError
    from app.core.units import fmt_bytes

    if not (args.paths or args.hf_cache or args.lmstudio or args.ollama):
        return ctx.fail("name a GGUF file or a folder to import, or --hf-cache / --lmstudio / --ollama", 2)
    result = ImportResult()
    failed: list[str] = []
    library = ctx.open_library()
    try:
        for path in args.paths:
            try:
                result.extend(import_path(library, path))
            except ModelFileError as exc:
                failed.append(f"{path}: {exc}")
        if args.hf_cache:
            result.extend(import_hf_cache(library))
        if args.lmstudio:
            result.extend(import_lmstudio(library))
        if args.ollama:
            result.extend(import_ollama(library))
    finally:
        library.close()
    for model in result.imported:
        sys.stdout.write(f"Imported {model.name} ({model.format}, {fmt_bytes(model.size)}) from {model.path}\n")
    for skipped in result.skipped:
        failed.append(f"{skipped.path}: {skipped.reason}")
    for line in failed:
        sys.stderr.write(f"hearth import: skipped {line}\n")
    if result.where():
        sys.stdout.write(result.where() + "\n")
    if not result.imported:
        sys.stdout.write("Nothing imported.\n")
        return 1
    n = len(result.imported)
    sys.stdout.write(f"{n} model{'s' if n != 1 else ''} in your library now; see `hearth ls`.\n")
    return 0
