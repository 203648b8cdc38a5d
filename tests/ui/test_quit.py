"""Quitting ends the process right after Hearth's own shutdown: `python -m app` and `hearth` do not wait for
the interpreter's teardown (seconds of freeing with models and Qt loaded) nor for pool threads still busy
with work that holds nothing of the user's. In a child process: it must really exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A pool thread that never finishes its task: the interpreter's exit would join it forever.
BUSY_POOL = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
import app.main

pool = ThreadPoolExecutor(1, thread_name_prefix="never-done")
pool.submit(threading.Event().wait)
sys.exit(app.main.main([], exit_process=True))
"""


def test_the_process_ends_right_after_the_shutdown_whatever_threads_are_left(hearth_home):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEARTH_HOME": str(hearth_home), "HEARTH_QUIT_AFTER_MS": "0"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", BUSY_POOL],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # without exit_now it never ends: the pool thread is joined
    )
    assert done.returncode == 0, done.stderr[-2000:]
    log = (hearth_home / "logs" / "hearth.log").read_text(encoding="utf-8")
    assert "Hearth stopped" in log  # the shutdown ran, and its log line was flushed before the exit
