"""`hearth serve`: the local API (OpenAI, Anthropic and Ollama routes) with no window. Models from the library
load on demand (JIT) and unload after an idle time; Ctrl-C or SIGTERM stop it within seconds."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.cli.context import CliContext

SERVE_IDLE_MINUTES = 15  # `hearth serve` frees memory when nobody asks for a while (the GUI never does by default)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def add_serve_command(subparsers: Any) -> None:
    from app.cli.context import parallel_count
    from app.core.settings import DEFAULT_SERVER_PORT, OLLAMA_PORT, SPECULATIVE_FLAGS

    serve = subparsers.add_parser("serve", help="serve the local API: OpenAI, Anthropic and Ollama routes (no window)")
    serve.add_argument(
        "--model",
        action="append",
        help="load this model first and keep it loaded (a library name or a model file); repeat it to load several",
    )
    serve.add_argument(
        "--max-models",
        type=int,
        metavar="N",
        help="keep at most N models loaded at once; 0: as many as fit in memory (default: Settings → Server)",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; anything else is LAN mode, which needs a key)",
    )
    serve.add_argument("--port", type=int, help=f"port (default: Settings → Server, else {DEFAULT_SERVER_PORT})")
    serve.add_argument("--api-key", help="require this key (Authorization: Bearer or x-api-key)")
    serve.add_argument(
        "--ollama-port",
        action=argparse.BooleanOptionalAction,
        help=f"also answer on Ollama's port {OLLAMA_PORT}, for tools with its address hard-coded; a port in use "
        "(Ollama itself) is a note, not a failure (default: Settings → Server)",
    )
    serve.add_argument(
        "--idle-minutes",
        type=int,
        help=f"unload an idle model after this many minutes; 0 never (default {SERVE_IDLE_MINUTES})",
    )
    serve.add_argument("--no-jit", action="store_true", help="never load a model a request asks for")
    serve.add_argument(
        "--deterministic",
        action="store_true",
        help="the same reply beside other requests as alone (Settings → Same answer every time; slower together)",
    )
    serve.add_argument(
        "--parallel",
        type=parallel_count,
        metavar="N",
        help="requests a model runs at once, fewer where memory is short; 1: one at a time; auto: as many as "
        "memory allows, up to 8 (default: Settings → Parallel requests, auto unless changed)",
    )
    serve.add_argument(
        "--speculative",
        choices=SPECULATIVE_FLAGS,
        help="speculative decoding with n-gram drafts (lossless): auto sizes each draft by what it measures "
        "to earn on this machine and drafts nothing where nothing pays; ngram always drafts; default: "
        "Settings → Speculative decoding (auto)",
    )
    serve.add_argument(
        "--draft-model",
        metavar="NAME",
        help="a smaller library model with the same tokenizer that drafts for the models served (speculative "
        "decoding, lossless); models it cannot draft for load without it (default: the ones picked in the app)",
    )
    serve.set_defaults(handler=cmd_serve)


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def cmd_serve(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.documents.service import Documents
    from app.core.documents.vector_stores import VectorStores
    from app.core.downloads.manager import DownloadManager
    from app.core.engines import default_registry
    from app.core.engines.remote import open_remotes
    from app.core.errors import HearthError
    from app.core.runtime.drafts import DraftFinder
    from app.core.runtime.pool import ModelPool
    from app.core.runtime.resolve import ModelResolver
    from app.core.settings import OLLAMA_PORT, load_speculative
    from app.server.app import create_app
    from app.server.config import policy_for
    from app.server.context import ServerContext
    from app.server.keys import new_api_key
    from app.server.ollama.pull import OnDemandDownloads
    from app.server.remote_forward import RemotePool
    from app.server.responses.store import ResponseStore
    from app.server.runner import ServerThread
    from app.server.service import start_ollama_listener

    server = ctx.settings.server
    lan = args.host not in LOOPBACK_HOSTS
    key = args.api_key or ""
    if lan:
        server = server.model_copy(update={"bind": "lan"})
        key = key or server.api_key or new_api_key()
    elif not key and server.key_required:
        key = server.api_key
    try:
        policy = policy_for(server, key or None)
    except ValueError as exc:
        return ctx.fail(exc, 2)
    idle = SERVE_IDLE_MINUTES if args.idle_minutes is None else max(0, args.idle_minutes)
    library = ctx.open_library()
    remotes = open_remotes(ctx.paths)  # remote models the user chose to expose are served here too
    slots = ctx.settings.parallel_requests if args.parallel is None else args.parallel
    if args.draft_model and library.find(args.draft_model) is None:
        library.close()
        return ctx.fail(f"no model {args.draft_model!r} in the library to draft with (see `hearth ls`)", 2)
    picked = ctx.settings.draft_models
    resolver = ModelResolver(
        library,
        max_context=server.jit_context,
        remotes=remotes,
        max_slots=slots,
        speculative=load_speculative(ctx.settings.speculative, args.speculative),
        deterministic=ctx.settings.deterministic or args.deterministic,
        drafts=DraftFinder(library),
        draft_for=lambda m: args.draft_model or picked.get(m.id),
        template_for=lambda m: ctx.settings.chat_templates.get(m.id),  # picked in My Models or the chat
    )
    from app.core.engines.llamacpp.canary import recover_native_crashes

    for note in recover_native_crashes():  # a crash last time: that configuration is not used again
        _err(f"note: {note}")
    host = ModelPool(
        default_registry(),
        calibration=ctx.calibration,
        resolver=resolver,
        jit=not args.no_jit,
        queue_size=server.queue_size,
        idle_ttl_s=idle * 60 or None,
        max_models=server.max_loaded_models if args.max_models is None else max(0, args.max_models),
    )
    host.notice.connect(lambda text: _err(f"note: {text}"))
    stored = ResponseStore(ctx.paths.responses_file if server.keep_responses else None)
    hub = ctx.hub
    # /api/pull fetches into the queue `hearth pull` and the app use; finished pulls land in the library.
    downloads = OnDemandDownloads(
        lambda: DownloadManager(
            library.models_dir,
            ctx.paths.downloads_state,
            max_parallel=ctx.settings.parallel_downloads,
            token=hub.token,
            endpoint=hub.endpoint,
        ),
        library,
    )
    # The same documents the window has: a vector store made over the API is a collection there too.
    documents = Documents.on_pool(ctx.paths.documents_db, host, resolver, settings=lambda: ctx.settings.documents)
    context = ServerContext(
        host,
        library,
        resolver,
        responses=stored,
        remotes=RemotePool(remotes),
        hub=lambda: hub,
        downloads=downloads,
        stores=VectorStores.over(documents, ctx.paths.uploads),
    )
    app = create_app(context, policy)
    runner = ServerThread(app, args.host, args.port or server.port, context.cancel_streams)
    ollama = None
    try:
        for model in args.model or []:
            _load_first(host, resolver, _library_name(library, model), args.draft_model, slots)
        documents.start()
        runner.start()
        _err(f"Hearth API on {runner.url}/v1" + (f"  (API key: {key})" if key and not args.api_key else ""))
        if server.ollama_port if args.ollama_port is None else args.ollama_port:
            ollama, why = start_ollama_listener(app, args.host, OLLAMA_PORT, runner.port, context.cancel_streams)
            _err(f"Also answering as Ollama on {ollama.url}" if ollama is not None else f"note: {why}")
        _err("Press Ctrl-C to stop.")
        _wait_for_stop()
        return 0
    except HearthError as exc:
        return ctx.fail(exc)
    finally:
        if ollama is not None:
            ollama.stop()
        runner.stop()
        documents.close()  # before the pool: its run stops between two batches
        host.shutdown(10)
        if context.remotes is not None:
            context.remotes.close()
        downloads.close()
        library.close()


def _load_first(host: Any, resolver: Any, name: str, draft_model: str | None, slots: int) -> None:
    """Load `name` before serving (pinned: a model asked for on the command line is not unloaded to make
    room for one a request asks for) and say how it loaded."""
    _err(f"loading {name} …")
    job = resolver(name)  # at its usual context, grown when a request needs more (as a JIT load)
    spec = job.spec
    info = host.wait_for(host.submit(dataclasses.replace(job, pin=True)), 600.0)
    drafts = f", speculative decoding: {spec.speculative}" if spec.speculative != "off" else ""
    if spec.draft_model is not None:
        drafts += f" ({spec.draft_model.name})"
    elif draft_model and resolver.drafts is not None:
        why = resolver.drafts.pick(resolver.find(name), draft_model, None)
        _err(f"no draft model: {why.note if why.path is None else 'it does not fit beside the model'}")
    _err(f"{name}: {info.n_ctx:,}-token context, {_slots_text(host.state.slots_total, slots)}{drafts}")


def _slots_text(loaded: int, asked: int) -> str:
    from app.core.settings import AUTO_PARALLEL

    text = f"{loaded} parallel slot{'s' if loaded != 1 else ''}"
    if asked == AUTO_PARALLEL:
        return text + " (auto: as many as memory allows)"
    return text + (f" ({asked} asked; fewer fit in memory)" if loaded < asked else "")


def _library_name(library: Any, model: str) -> str:
    """A library name as given; a model file not in the library yet is imported in place first."""
    from app.core.library import import_path

    if library.find(model) is None and Path(model).expanduser().exists():
        return import_path(library, model).imported[0].name
    return model


def _wait_for_stop() -> None:
    """Block the main thread until Ctrl-C or SIGTERM (a service manager's stop)."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
