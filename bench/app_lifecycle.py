"""Cold start and quit of the real app, as a person sees them: `python -m app` in a child process with a
fresh HEARTH_HOME (a library model and a saved chat, so My Models and Chat have something to fill).

- Start: from launching the process to the window shown, the moment the app logs "window shown" (the log's
  clock, to the millisecond, against this script's clock when it launched the process: psutil's start time is
  only as exact as the boot time Linux gives in whole seconds).
- Quit: the app is asked to quit (HEARTH_QUIT_AFTER_MS, the same path as File → Quit) and the time runs until
  the process has exited: the app's shutdown and the interpreter's teardown (threads joined, files closed).

Used by bench/ui_latency.py; `python bench/app_lifecycle.py [--runs 5]` runs it alone.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = re.compile(r"^(\S+ \S+) INFO \[MainThread\] app\.main: window shown", re.M)
ASKED = re.compile(r"^(\S+ \S+) INFO \[MainThread\] app\.main: quit asked", re.M)
QUIT_AFTER_MS = 2500  # past the window's first fill, so quitting has downloads, probes and pages to close
TIMEOUT_S = 60


@dataclass(frozen=True)
class Lifecycle:
    start_s: float  # launch → window shown
    quit_s: float  # quit asked → process gone


def seed_home(home: Path) -> None:
    """A model in the library and a saved chat, written through the app's own stores; the Hub is a closed
    local port, so nothing reaches the internet and Discover shows its offline state."""
    sys.path.insert(0, str(ROOT))
    from app.core.chat.store import ChatStore
    from app.core.library import Library, import_path
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from tests.fixtures.tiny_gguf import write_tiny_llama_gguf

    paths = app_paths({"HEARTH_HOME": str(home)}).ensure()
    library = Library(paths.models, paths.library_db)
    try:
        import_path(library, write_tiny_llama_gguf(paths.models / "Tiny-Llama-F16.gguf", name="Tiny Llama"))
    finally:
        library.close()
    chats = ChatStore(paths.chats_db)
    try:
        conv = chats.create_conversation("A saved chat", model_id="Tiny Llama")
        parent = None
        for i in range(3):
            user = chats.add_user_message(conv.id, f"Question {i}: " + "why? " * 40)
            parent = chats.begin_assistant(conv.id, user)
            chats.finish_assistant(parent, f"Answer {i}. " + "Because. " * 60, finish_reason="stop")
    finally:
        chats.close()
    store = SettingsStore(paths.settings_file)
    store.save(store.load().model_copy(update={"hf_endpoint": "http://127.0.0.1:9"}))


def run_once(home: Path) -> Lifecycle:
    env = dict(os.environ, HEARTH_HOME=str(home), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    env["HEARTH_QUIT_AFTER_MS"] = str(QUIT_AFTER_MS)
    # As an installed app runs: its modules' bytecode cached (written on the first run if not yet there).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    log = home / "logs" / "hearth.log"
    log.unlink(missing_ok=True)
    launched = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    exited = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"the app exited with {proc.returncode}: {proc.stderr[-2000:]}")
    text = log.read_text(encoding="utf-8")
    shown = SHOWN.search(text)
    if shown is None:
        raise RuntimeError(f"no 'window shown' line in {log}")
    asked = ASKED.search(text)  # the log's own clock (ms) marks when the quit was asked
    if asked is None:
        raise RuntimeError(f"no 'quit asked' line in {log}")
    asked_at = datetime.strptime(asked.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    shown_at = datetime.strptime(shown.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return Lifecycle(start_s=shown_at - launched, quit_s=exited - asked_at)


def measure(runs: int = 5) -> tuple[list[Lifecycle], Path]:
    """`runs` cold starts and quits of one seeded home (the first run also makes the home's caches, as a
    first launch after install would; it is kept, since a person meets it)."""
    home = Path(tempfile.mkdtemp(prefix="hearth-lifecycle-"))
    seed_home(home)
    return [run_once(home) for _ in range(runs)], home


def summary(results: list[Lifecycle]) -> tuple[float, float]:
    """Median start and quit in seconds."""
    return statistics.median(r.start_s for r in results), statistics.median(r.quit_s for r in results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    results, home = measure(args.runs)
    for r in results:
        sys.stdout.write(f"start {r.start_s:.2f} s  quit {r.quit_s:.2f} s\n")
    start, quit_s = summary(results)
    sys.stdout.write(f"median: start {start:.2f} s, quit {quit_s:.2f} s ({home})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
