"""Every page of the real window at 900x600, light and dark: nothing scrolls sideways and no button's text is
cut, also while Discover shows long errors (issue 33: an offline error widened the page, "Search" became "Sear").

One window for the whole module (building it is the slow part); each case shows a page and measures it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtWidgets import QAbstractScrollArea, QApplication, QPushButton, QToolButton, QWidget

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "models"))

from synthetic import GiB, profile

THEMES = ("light", "dark")
PAGES = ("discover", "models", "downloads", "chat", "documents", "server", "bench", "hardware")
# A failure the way a user meets one: a long URL and the exception's own words, hardly a space to wrap at.
LONG_ERROR = (
    "Could not reach https://huggingface.co/api/models/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF/revision/main"
    "?expand[]=siblings&expand[]=gguf&blobs=true: httpx.ConnectError: [Errno -3] Temporary failure in name "
    "resolution (while connecting to huggingface.co:443 through proxy=None, timeout=10.0s, retries=3/3, "
    "last_attempt=2026-12-04T06:35:26Z)"
)
MACHINE = profile(ram_total=16 * GiB, ram_free=12 * GiB, bw=60.0)
# Much memory and little bandwidth: most picks fit but write slower than people read (a wide badge each).
SLOW_MACHINE = profile(ram_total=64 * GiB, ram_free=60 * GiB, bw=8.0)


def settle() -> None:
    """Run queued work (pool answers, layout requests, deleted widgets) until nothing is pending."""
    app = QApplication.instance()
    for _ in range(5):
        app.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def where(widget: QWidget) -> str:
    """The widget's class and its ancestors' up to the page, for a failure message a reader can place."""
    names = []
    while widget is not None and len(names) < 4:
        names.append(type(widget).__name__)
        widget = widget.parentWidget()
    return " in ".join(names)


def misfits(root: QWidget) -> list[str]:
    """What is cut or scrolls sideways under `root`, in words a failure message can show."""
    out = []
    for area in root.findChildren(QAbstractScrollArea):
        if area.isVisible() and area.horizontalScrollBar().isVisible():
            out.append(f"{where(area)} scrolls sideways")
    for button in root.findChildren(QPushButton) + root.findChildren(QToolButton):
        text = button.text().replace("&", "")
        if not button.isVisible() or not text:
            continue
        # The style sheet's own measure of the button (text, padding, border, icon): narrower is cut.
        if button.width() < button.sizeHint().width():
            out.append(f"{where(button)} {text!r} is {button.width()} px wide, needs {button.sizeHint().width()}")
    return out


@pytest.fixture(scope="module")
def shell(qapp, tmp_path_factory):
    """The real window (build_shell), themed, on a Hub that cannot be reached (a closed local port)."""
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.main import build_shell
    from app.ui.theme import ThemeManager

    look = (qapp.styleSheet(), qapp.palette(), qapp.property("hearthColours"))
    home = tmp_path_factory.mktemp("layout-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEARTH_HOME", str(home))
        mp.setenv("HF_HOME", str(home / "hf"))
        paths = app_paths().ensure()
        store = SettingsStore(paths.settings_file)
        settings = store.load().model_copy(
            update={"measure_bandwidth_on_start": False, "hf_endpoint": "http://127.0.0.1:9"}
        )
        store.save(settings)
        themes = ThemeManager(qapp, "light")
        themes.apply()
        built = build_shell(paths, store, settings, probe=lambda _refresh=False: MACHINE, themes=themes)
        window = built.window
        window.resize(900, 600)
        window.show()
        window.page("hardware").refresh()
        discover = window.page("discover")
        for _ in range(400):  # the ranking runs on the pool
            settle()
            if discover.picks and discover.start_here.isVisible():
                break
            time.sleep(0.025)
        yield built, themes
        built.shutdown()
        window.close()
        window.deleteLater()  # else it outlives the module, and every later restyle restyles its ~900 widgets
        themes.deleteLater()
        qapp.setStyleSheet(look[0])
        qapp.setPalette(look[1])
        qapp.setProperty("hearthColours", look[2])


def show(shell, theme: str, page: str) -> QWidget:
    built, themes = shell
    themes.apply(theme)
    window = built.window
    window.resize(900, 600)
    window.show_page(page)
    settle()
    return window.page(page)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("page", PAGES)
def test_every_page_fits_900x600(shell, theme, page):
    built, _ = shell
    assert built.window.width() == 900
    assert misfits(show(shell, theme, page)) == []


def test_the_cases_cover_every_page_of_the_window(shell):
    window = shell[0].window
    assert [window.sidebar.item(i).data(Qt.ItemDataRole.UserRole) for i in range(window.sidebar.count())] == list(PAGES)


@pytest.mark.parametrize("theme", THEMES)
def test_discover_fits_with_long_errors_in_start_here_and_search(shell, theme, qtbot):
    built, _ = shell
    discover = show(shell, theme, "discover")
    discover.stack.setCurrentIndex(0)
    card = discover.start_here
    assert card.isVisible() and card.pick is not None and card.pick.best is not None
    panel = built.window.page("downloads")
    # The Downloads page's own signal for a download that could not start: the card's button shows it.
    panel.request_finished.emit(card.pick.best.variant, LONG_ERROR)
    search = discover.search
    with qtbot.waitSignal(search.search_failed, timeout=20_000):  # the closed port: the real failure first
        search.search()
    search._failed(search._generation, RuntimeError(LONG_ERROR))  # then a long one, through the same path
    settle()
    assert card.button.button.text() == "Retry"
    assert misfits(discover) == []
    assert not search.view.isVisible()  # no empty results box under a failed search


@pytest.mark.parametrize("theme", THEMES)
def test_a_model_page_fits_with_a_long_error(shell, theme, qtbot):
    discover = show(shell, theme, "discover")
    with qtbot.waitSignal(discover.repo_failed, timeout=20_000):  # the closed port: the real failure first
        discover.open_pick(discover.picks[0])
    pick = discover.picks[0]
    discover._pick_offline(discover._opening, pick, RuntimeError(LONG_ERROR))
    shell[0].window.page("downloads").request_finished.emit(pick.best.variant, LONG_ERROR)  # a Download failed
    settle()
    view = discover.model_view
    try:
        assert view.notice.isVisible() and view.notice.text().startswith("Could not reach https://")
        assert view.download_error.isVisible() and LONG_ERROR[:40] in view.download_error.text()
        assert misfits(discover) == []
    finally:
        discover.stack.setCurrentIndex(0)


@pytest.mark.parametrize("theme", THEMES)
def test_discover_fits_with_slow_picks(shell, theme, qtbot):
    discover = show(shell, theme, "discover")
    discover.stack.setCurrentIndex(0)
    try:
        with qtbot.waitSignal(discover.picks_ready, timeout=10_000):
            discover.set_profile(SLOW_MACHINE)
        settle()
        assert any(row.badge.text().startswith("Slow on this machine") for row in discover.recommended.rows)
        assert misfits(discover) == []
    finally:
        with qtbot.waitSignal(discover.picks_ready, timeout=10_000):
            discover.set_profile(MACHINE)
        settle()
