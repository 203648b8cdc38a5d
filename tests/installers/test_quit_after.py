"""HEARTH_QUIT_AFTER_MS: how bundle-check runs the packaged GUI headless and sees it close cleanly."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import app.main
from tests.installers.helpers import ROOT


class FakeApp:
    def __init__(self) -> None:
        self.quit_calls = 0

    def quit(self) -> None:
        self.quit_calls += 1


def test_quit_after_posts_a_quit_once_the_loop_runs(monkeypatch, qtbot):
    monkeypatch.setenv(app.main.QUIT_AFTER_ENV, "20")
    fake = FakeApp()
    app.main._quit_after(fake)
    assert fake.quit_calls == 0  # posted, not called
    qtbot.waitUntil(lambda: fake.quit_calls == 1, timeout=2000)


def test_without_the_variable_nothing_is_scheduled(monkeypatch, qtbot):
    monkeypatch.delenv(app.main.QUIT_AFTER_ENV, raising=False)
    fake = FakeApp()
    app.main._quit_after(fake)
    qtbot.wait(50)
    assert fake.quit_calls == 0


def test_a_value_that_is_not_a_number_is_ignored_with_a_warning(monkeypatch, qtbot, caplog):
    monkeypatch.setenv(app.main.QUIT_AFTER_ENV, "soon")
    fake = FakeApp()
    with caplog.at_level(logging.WARNING, logger="app.main"):
        app.main._quit_after(fake)
    qtbot.wait(50)
    assert fake.quit_calls == 0
    assert "HEARTH_QUIT_AFTER_MS='soon' is not a whole number" in caplog.text


def test_the_window_opens_and_quits_by_itself_cleanly(hearth_home):
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "HEARTH_HOME": str(hearth_home),
        "HEARTH_QUIT_AFTER_MS": "1500",
    }
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - t0 >= 1.5
    log = (hearth_home / "logs" / "hearth.log").read_text()
    assert "quitting after 1500 ms" in log and "Hearth stopped" in log
