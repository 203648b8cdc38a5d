"""The model `hearth run`, `chat` and `bench` load: a path or a library name (or REMOTE/MODEL-ID), with the
speculative decoding and vision projector the app would give it, loaded on an engine host of the command's own
(Ctrl-C cancels the load)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.formats import GGUF

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.engines.base import LoadSpec, ModelInfo
    from app.core.engines.remote import RemoteStore
    from app.core.runtime.engine_host import EngineHost


def err(text: str) -> None:
    """A notice on stderr (the reply alone goes to stdout)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def resolve_model(ctx: CliContext, name: str) -> tuple[Path, str]:
    """A model's path (a GGUF file, an MLX folder, a plug-in's model) and its format: a path, or a name from
    `hearth ls`."""
    from app.core.runtime.preflight import format_for_path

    path = Path(name).expanduser()
    if not path.exists():
        from app.core.models.errors import ModelFileError

        library = ctx.open_library()
        try:
            model = library.find(name)
            if model is None:
                raise ModelFileError(f"{name!r} is neither a file nor a model in your library (see `hearth ls`)")
            if not model.ready:
                raise ModelFileError(f"{model.name} is {model.status} in your library: {model.reason or 'not usable'}")
            library.touch(model.id)
        finally:
            library.close()
        return Path(model.path).resolve(), model.format  # the library knows what it holds (a plug-in's too)
    return path.resolve(), format_for_path(path)


def template_pick(ctx: CliContext, name: str, path: Path) -> str | None:
    """The chat template picked for this library model (My Models, the chat's Advanced), if any."""
    if not ctx.settings.chat_templates:
        return None
    from app.cli.images import library_entry

    model = library_entry(ctx, name, path)
    return ctx.settings.chat_templates.get(model.id) if model is not None else None


def speculation(ctx: CliContext, args: argparse.Namespace, fmt: str) -> str:
    """The n-gram drafting mode of a load: --speculative, else the setting, else as the app plans it."""
    from app.core.runtime.preflight import speculation_for
    from app.core.settings import load_speculative

    return speculation_for(fmt, load_speculative(ctx.settings.speculative, getattr(args, "speculative", None)))


def start_host(ctx: CliContext, args: argparse.Namespace) -> tuple[EngineHost, ModelInfo]:
    """Resolve the model, start a host and load it (Ctrl-C cancels the load). Returns (host, ModelInfo)."""
    from app.core.engines import default_registry
    from app.core.engines.base import LoadSpec
    from app.core.models.errors import ModelFileError
    from app.core.runtime.engine_host import EngineHost

    remote = _remote_spec(ctx, args.model)
    if remote is not None:
        return _start_remote(ctx, *remote)
    registry = default_registry()  # first: a plug-in's kind claims its model files from here on
    try:
        path, fmt = resolve_model(ctx, args.model)
    except ModelFileError as exc:
        if "/" in args.model:  # it looks like REMOTE/MODEL-ID: say where remote models are listed
            raise ModelFileError(f"{exc}, nor a remote model (see `hearth remote ls`)") from exc
        raise
    from app.core.engines.llamacpp.canary import recover_native_crashes

    for note in recover_native_crashes():  # a crash last time: that configuration is not used again
        err(f"note: {note}")
    host = EngineHost(registry, calibration=ctx.calibration, name="hearth-engine")
    threads = args.threads
    if threads is None and fmt == GGUF:
        from app.core.engines.llamacpp.options import default_threads

        threads = default_threads()
    try:
        drafting: dict = {"speculative": speculation(ctx, args, fmt)}
        if getattr(args, "draft_model", None):
            draft, draft_fmt = resolve_model(ctx, args.draft_model)
            if draft_fmt != fmt:
                raise ModelFileError(f"a draft model for a {fmt} model must be one too, not {draft_fmt}")
            drafting = {"speculative": "draft", "draft_model": draft}
        from app.cli.images import projector_for

        spec = LoadSpec(
            path=path,
            n_ctx=args.ctx,
            n_threads=threads,
            seed=args.seed,
            slots=getattr(args, "parallel", 1),
            projector=projector_for(ctx, args.model, path, fmt),
            chat_template=template_pick(ctx, args.model, path),
            **drafting,
        )
        info = host.load_sync(spec, fmt)
    except BaseException:
        host.shutdown(10)
        raise
    if info.template_notice:
        err(f"note: {info.template_notice}")
    if info.extra.get("native_note"):
        err(f"note: {info.extra['native_note']} (`hearth doctor` says more)")
    return host, info


def _remote_spec(ctx: CliContext, name: str) -> tuple[RemoteStore, LoadSpec] | None:
    """A `remote/model` name no file or library model has: the remote's store and the load for it."""
    if "/" not in name or Path(name).expanduser().exists():
        return None
    library = ctx.open_library()
    try:
        if library.find(name) is not None:
            return None
    finally:
        library.close()
    from app.cli.remote import open_store

    store = open_store(ctx)
    spec = store.load_spec(name)
    return (store, spec) if spec is not None else None


def _start_remote(ctx: CliContext, store: RemoteStore, spec: LoadSpec) -> tuple[EngineHost, ModelInfo]:
    from app.core.engines import default_registry
    from app.core.engines.remote import FORMAT, register_remote
    from app.core.runtime.engine_host import EngineHost

    host = EngineHost(register_remote(default_registry(), store), name="hearth-engine")
    try:
        info = host.load_sync(spec, FORMAT)
    except BaseException:
        host.shutdown(10)
        raise
    return host, info
