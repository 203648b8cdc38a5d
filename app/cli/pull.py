"""`hearth pull REPO[:QUANT | @BRANCH]`: download a variant in the foreground, then add it to the library."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from app.cli.context import CliContext

BAR_WIDTH = 28
REDRAW_S = 0.1


def add_pull_command(subparsers: argparse._SubParsersAction) -> None:
    """Add `pull`; its parser's `handler` default is the function to call with (ctx, args)."""
    pull = subparsers.add_parser("pull", help="download a model from the Hugging Face Hub into your library")
    pull.add_argument("model", help="owner/name, owner/name:QUANT (e.g. :Q4_K_M) or owner/name@BRANCH (EXL2)")
    pull.set_defaults(handler=cmd_pull)


def parse_spec(text: str) -> tuple[str, str | None, str | None]:
    """'org/Repo:Q8_0' → (repo, 'Q8_0', None); 'org/Repo@4.0bpw' → (repo, None, '4.0bpw')."""
    text = text.strip()
    if "@" in text:
        repo, branch = text.split("@", 1)
        return repo, None, branch or None
    if ":" in text:
        repo, quant = text.split(":", 1)
        return repo, quant or None, None
    return text, None, None


def progress_line(done: int, total: int, rate: float, eta: float | None) -> str:
    from app.core.units import fmt_bytes, fmt_eta

    frac = done / total if total else 0.0
    filled = int(BAR_WIDTH * frac)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    return (
        f"[{bar}] {frac * 100:5.1f}%  {fmt_bytes(done)} / {fmt_bytes(total)}  "
        f"{fmt_bytes(rate)}/s  {fmt_eta(eta) or 'time left unknown'}"
    )


def choose_variant(ctx: CliContext, repo: str, quant: str | None, branch: str | None):
    """The recommender's Variant to fetch: the named quant or branch, else the one recommended here."""
    from app.core.hub.errors import HubNotFound

    if quant or branch:
        from app.core.hub.variants import repo_variants

        choices = repo_variants(ctx.hub, repo)
        if branch:
            hits = [c for c in choices if c.branch == branch]
        else:
            hits = [c for c in choices if c.label.lower() == quant.lower()]
        if not hits:
            have = ", ".join(c.branch if branch else c.label for c in choices) or "none"
            raise HubNotFound(f"{repo} has no {'branch ' + branch if branch else quant}; it offers: {have}")
        return hits[0].to_variant()
    from app.core.hardware import probe_hardware
    from app.core.models.devices import machine_from_profile
    from app.core.models.recommend import assess

    variants = ctx.hub_variants(repo)
    machine = machine_from_profile(probe_hardware(cache_dir=ctx.paths.cache, measure_bandwidth=False))
    rec = assess(variants, machine)
    if rec.recommended is None:
        raise HubNotFound(f"no variant of {repo} runs on this machine: {rec.why}")
    return rec.recommended.variant


def cmd_pull(ctx: CliContext, args: argparse.Namespace, out: TextIO | None = None) -> int:
    from app.core.downloads.items import State
    from app.core.downloads.manager import DownloadManager
    from app.core.downloads.resolve import queue_download, resolve_download
    from app.core.errors import HearthError
    from app.core.library.from_downloads import add_to_library
    from app.core.units import fmt_bytes

    out = out or sys.stderr
    client = ctx.hub
    repo, quant, branch = parse_spec(args.model)
    try:
        variant = choose_variant(ctx, repo, quant, branch)
        plan = resolve_download(client, variant)
    except HearthError as exc:
        return ctx.fail(exc)
    library = ctx.open_library()
    manager = DownloadManager(
        library.models_dir,
        ctx.paths.downloads_state,
        max_parallel=ctx.settings.parallel_downloads,
        token=client.token,
        endpoint=client.endpoint,
    )
    lock = threading.Lock()
    last = [0.0]

    def on_progress(p) -> None:
        """Worker thread: redraw at most 10 times a second."""
        now = time.monotonic()
        if p.item_id != item_id[0] or now - last[0] < REDRAW_S:
            return
        with lock:
            last[0] = now
            out.write("\r" + progress_line(p.done, p.total, p.rate, p.eta))
            out.flush()

    item_id = [""]
    manager.progress.connect(on_progress)
    try:
        sys.stdout.write(
            f"Pulling {plan.repo_id} {plan.label} ({fmt_bytes(plan.size)}, {len(plan.files)} "
            f"file{'s' if len(plan.files) != 1 else ''})\n"
        )
        sys.stdout.flush()
        started = time.monotonic()
        item_id[0] = queue_download(manager, plan)
        try:
            # Short waits: Ctrl-C must get through promptly.
            state = manager.wait(item_id[0], 0.5)
            while state is not None and state not in (State.DONE, State.FAILED, State.PAUSED):
                state = manager.wait(item_id[0], 0.5)
        except KeyboardInterrupt:
            manager.pause(item_id[0])
            manager.wait(item_id[0], 10)
            with lock:
                out.write(f"\nPaused. Run `hearth pull {args.model}` again to resume where it stopped.\n")
            return 130
        item = manager.get(item_id[0])
        with lock:
            if item is not None and state == State.DONE:
                elapsed = max(time.monotonic() - started, 1e-3)
                out.write("\r" + progress_line(item.total, item.total, item.total / elapsed, 0))
            out.write("\n")
        if item is None or state != State.DONE:
            why = item.error if item and item.error else f"the download is {state.value if state else 'gone'}"
            ctx.fail(why)
            if item is not None and state in (State.FAILED, State.PAUSED):
                sys.stderr.write(f"Run `hearth pull {args.model}` again to retry.\n")
            return 1
        model = add_to_library(library, manager, item)
        sys.stdout.write(f"Done: {model.name} ({fmt_bytes(model.size)}) verified and saved to {model.path}\n")
        return 0
    finally:
        manager.close()
        library.close()
