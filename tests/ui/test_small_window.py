"""Issue 46 item 12: a window restored at 900×600 opens at 900×600 (it opened at 874×374), clamped to the
screen and never below a sane minimum; at that size the chat's thread keeps most of the page's height (the
loaded-models strip shows the model in chat and "2 more loaded…", instead of pushing the thread down to ~70 px)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PySide6.QtCore import QRect

from app.core.chat.store import ChatStore
from app.core.runtime.pool import ModelPool
from app.ui.chat import ChatPage
from app.ui.main_window import MIN_RESTORED, fit_to_screen, geometry_text, parse_geometry
from app.ui.tasks import TaskRunner
from tests.core.runtime.test_pool import NameResolver
from tests.fixtures.fake_engine import registry_with_fake

ROOT = Path(__file__).resolve().parents[2]
THREAD_SHARE = 0.5  # of the chat page's height, at 900×600 with three models loaded (it had a third)
SIDEBAR, CHROME = 196, 50  # the window's sidebar, and its menu and status bars


def test_the_saved_geometry_reads_back_and_fits_the_screen():
    saved = geometry_text(QRect(120, 80, 900, 600))
    assert parse_geometry(saved) == (QRect(120, 80, 900, 600), False)
    assert parse_geometry(geometry_text(QRect(0, 0, 1000, 700), True)) == (QRect(0, 0, 1000, 700), True)
    assert parse_geometry("AdnQywADAAAAAAAA") is None and parse_geometry("rect:1,2,x,4") is None
    screen = QRect(0, 0, 1280, 800)
    assert fit_to_screen(QRect(120, 80, 900, 600), screen) == QRect(120, 80, 900, 600)  # as saved
    assert fit_to_screen(QRect(0, 0, 3000, 2000), screen) == screen  # never larger than the screen
    small = fit_to_screen(QRect(10, 10, 300, 200), screen)
    assert (small.width(), small.height()) == (MIN_RESTORED.width(), MIN_RESTORED.height())
    # Off the screen (a monitor unplugged since): brought back onto it, its size kept.
    assert fit_to_screen(QRect(2500, 900, 900, 600), screen) == QRect(380, 200, 900, 600)


RESTORE = textwrap.dedent(
    """
    import json, sys
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QApplication, QMainWindow
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore, WindowState
    from app.main import build_shell
    from app.ui.main_window import geometry_text

    app = QApplication([])
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    # What an earlier version saved: Qt's own blob, here of the window it had shrunk to 874×374.
    old = QMainWindow()
    old.setGeometry(100, 60, 874, 374)
    old.show()
    app.processEvents()
    blob = bytes(old.saveGeometry().toBase64().data()).decode("ascii")
    old.close()
    out = {}
    for name, saved in (
        ("900x600", geometry_text(QRect(100, 60, 900, 600))),
        ("huge", geometry_text(QRect(0, 0, 4000, 3000))),
        ("shrunk-by-qt", blob),
    ):
        window = WindowState(geometry=saved, page="chat")
        settings = store.load().model_copy(update={"measure_bandwidth_on_start": False, "window": window})
        shell = build_shell(paths, store, settings)
        w = shell.window
        w.show()
        for _ in range(20):
            app.processEvents()
        chat = w.page("chat")
        out[name] = {"window": [w.width(), w.height()], "page": chat.height(), "thread": chat.thread_view.height()}
        w.close()
        w.save_state()
        out[name]["saved"] = w.settings.window.geometry
        shell.shutdown()
    print(json.dumps(out))
    """
)


def test_a_window_restored_at_900_by_600_is_900_by_600_with_the_thread_given_its_height(tmp_path):
    """A real window on a 1280×800 screen (Qt's offscreen platform, configured), in its own process: the
    test session's screen is the offscreen default, 800×600, too small to hold it."""
    config = tmp_path / "screen.json"
    config.write_text(json.dumps({"screens": [{"name": "big", "x": 0, "y": 0, "width": 1280, "height": 800}]}))
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": f"offscreen:configfile={config}",
        "HEARTH_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", RESTORE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["900x600"]["window"] == [900, 600], out
    assert out["900x600"]["saved"] == geometry_text(QRect(100, 60, 900, 600))
    assert out["900x600"]["thread"] >= THREAD_SHARE * out["900x600"]["page"], out
    assert out["huge"]["window"] == [1280, 800], out  # clamped to the screen
    assert out["shrunk-by-qt"]["window"] == [874, MIN_RESTORED.height()], out  # never below the minimum


@pytest.fixture
def chat_on_a_pool(qtbot, tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.fake").write_text(name)
    pool = ModelPool(registry_with_fake(), resolver=NameResolver(tmp_path))  # type: ignore[arg-type]
    executor = ThreadPoolExecutor(2)
    tasks = TaskRunner(executor)
    store = ChatStore(tmp_path / "chats.sqlite3")
    page = ChatPage(pool, store, None, tasks)
    qtbot.addWidget(page)
    yield page, pool
    page.shutdown()
    tasks.close()
    store.close()
    assert pool.shutdown(5.0)
    executor.shutdown(wait=True)


def test_at_900_by_600_the_strip_takes_one_line_and_the_thread_keeps_its_height(qtbot, chat_on_a_pool, themed):
    page, pool = chat_on_a_pool
    for name in ("a", "b", "c"):
        handle = pool.submit(pool.resolver(name))
        assert handle.wait(5) and handle.error is None
    page.resize(900 - SIDEBAR, 600 - CHROME)
    page.show()
    qtbot.waitExposed(page)
    strip = page.model_bar.loaded_models
    qtbot.waitUntil(lambda: len(strip.rows) == 3, timeout=5_000)
    qtbot.waitUntil(lambda: page.thread_view.height() >= THREAD_SHARE * page.height(), timeout=5_000)
    shown = [row for row in strip.rows.values() if row.isVisibleTo(strip)]
    assert len(shown) == 1 and not shown[0].focus.isHidden()  # the model in chat
    more = strip.more  # on the model bar's status line
    assert more.isVisibleTo(page) and "2 more loaded…" in more.text()
    assert more.geometry().top() == page.model_bar.status.geometry().top()  # no line of its own
    more.linkActivated.emit("more")  # the others, when asked for
    assert all(row.isVisibleTo(strip) for row in strip.rows.values()) and "show fewer" in more.text()
    more.linkActivated.emit("fewer")
    assert len([row for row in strip.rows.values() if row.isVisibleTo(strip)]) == 1
    # On a tall window every row shows, and nothing to click for them.
    page.resize(1280 - SIDEBAR, 1000)
    qtbot.waitUntil(lambda: all(row.isVisibleTo(strip) for row in strip.rows.values()), timeout=5_000)
    assert not strip.more.isVisibleTo(page)
