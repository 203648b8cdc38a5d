"""The arguments bench/run_all.py gives a bench, defined in one place.

Every bench that bench/run_all.py launches adds these options to its parser from here, and run_all builds its
command lines from the same names, so the two cannot disagree on a flag's spelling. Each bench script keeps its
parser in `build_parser()` (no side effects), so tests/bench/test_run_all.py parses every command line run_all
would launch with that bench's own parser, without running the bench.

- `--json PATH`: write the figures as {metric: {value, target, op}} (optionally under "metrics"); run_all reads
  them. fit_accuracy.py writes its rows with `--out` instead, and speed_scoreboard.py prints its figures.
- `--bin DIR`: where llama-server (and llama-bench) are; default $LLAMA_BIN, else the folder
  bench/build_peers.sh prints (it builds them once, about 10 minutes, and is cached after that). run_all passes
  the folder it found, and never starts that build.
- `--no-peer`: skip llama-server; only on benches that have figures without it. run_all passes it when
  llama-server is not built.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_PEERS = ROOT / "bench" / "build_peers.sh"
PEER_EXECUTABLES = ("llama-server", "llama-bench")

JSON = "--json"
BIN = "--bin"
NO_PEER = "--no-peer"


def add_json(parser: argparse.ArgumentParser, what: str = "the figures") -> None:
    parser.add_argument(
        JSON, type=Path, help=f"also write {what} here, as {{metric: {{value, target, op}}}} (bench/run_all.py)"
    )


def add_peers(parser: argparse.ArgumentParser, *, optional: bool = True) -> None:
    """`--bin DIR`, and `--no-peer` where the bench has figures without llama-server (`optional`)."""
    parser.add_argument(
        BIN,
        type=Path,
        default=os.environ.get("LLAMA_BIN") or None,
        help="folder with llama-server and llama-bench (default: $LLAMA_BIN, else bench/build_peers.sh's, "
        "built on first use, ~10 min)",
    )
    if optional:
        parser.add_argument(NO_PEER, action="store_true", help="skip llama-server")


def peer_dir(args: argparse.Namespace) -> Path:
    """The folder with llama-server and llama-bench: `--bin`, else bench/build_peers.sh's (built if missing)."""
    if args.bin:
        return Path(args.bin)
    out = subprocess.run(["bash", str(BUILD_PEERS), sys.executable], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def built_peer_dir() -> Path | None:
    """llama-server and llama-bench as bench/build_peers.sh leaves them (or $LLAMA_BIN); None if not built.
    Never builds them."""
    if os.environ.get("LLAMA_BIN"):
        candidates = [Path(os.environ["LLAMA_BIN"])]
    else:
        try:
            version = importlib.metadata.version("llama-cpp-python")
        except importlib.metadata.PackageNotFoundError:
            return None
        cache = Path(os.environ.get("HEARTH_BENCH_CACHE", Path.home() / ".cache" / "hearth-bench"))
        candidates = [cache / f"llama-cpp-python-{version}" / "build-peers" / "bin"]
    for d in candidates:
        if all(os.access(d / exe, os.X_OK) for exe in PEER_EXECUTABLES):
            return d
    return None
