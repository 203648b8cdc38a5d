"""`make screenshots` in CI: every page renders, in both themes, offscreen (one size here, to stay quick;
the make target renders both)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settled_when_idle(shots, shells: list):
    """The script's settle(), ended as soon as the shell's pool work has answered: when its task runner stays
    idle over three rounds of events (the Hub's answers, a repo page's header reads and the benchmark runs all
    answer through it), never later than the script's own wait. Only that the shots render is checked here;
    `make screenshots` keeps the script's waits."""

    def settle(app, seconds: float = 0.6) -> None:
        from PySide6.QtCore import QCoreApplication, QEvent

        end, idle_rounds = time.monotonic() + seconds, 0
        while idle_rounds < 3 and time.monotonic() < end:
            app.processEvents()
            QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            idle_rounds = 0 if any(shell.tasks.busy for shell in shells) else idle_rounds + 1
            time.sleep(0.02)

    return settle


def test_every_page_renders_in_both_themes(qtbot, tmp_path, hearth_home, monkeypatch):
    import os

    import app.main

    shots = load_script()
    # The Benchmark page's two real runs, as short as a run can be: only the shots are checked here.
    shots.BENCH_WORKLOAD = {"prompt_lens": [32], "gen_len": 4, "concurrency": [1], "runs": 1, "warmup": 0}
    shells: list = []
    build_shell = app.main.build_shell

    def keep_shell(*args, **kwargs):
        shells.append(build_shell(*args, **kwargs))
        return shells[-1]

    monkeypatch.setattr(app.main, "build_shell", keep_shell)  # the script builds its windows with it
    monkeypatch.setattr(shots, "settle", settled_when_idle(shots, shells))
    written = shots.render(tmp_path, sizes=((900, 600),))
    names = {p.name for p in written}
    pages = (*shots.PAGES, *shots.FIRST_START_PAGES)
    assert names == {f"{page}-{theme}-900x600.png" for page in pages for theme in shots.THEMES}
    for path in written:
        image = QImage(str(path))
        assert not image.isNull() and image.width() >= 600
        assert len({image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 37)}) > 3
    light = QImage(str(tmp_path / "models-light-900x600.png")).pixelColor(450, 580).lightness()
    dark = QImage(str(tmp_path / "models-dark-900x600.png")).pixelColor(450, 580).lightness()
    assert light > dark + 80  # the dark theme is dark
    assert os.environ["HEARTH_HOME"] == str(hearth_home)  # the script put the test's home back
