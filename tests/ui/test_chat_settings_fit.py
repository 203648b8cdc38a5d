"""The chat's Settings panel fits the default window: beside the chat where the page has room, else in the
thread's place; never a sideways scrollbar, a clipped button or a wider window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QAbstractButton

from app.core.paths import app_paths
from app.core.settings import SettingsStore
from app.main import build_shell


def settle(qapp, window) -> None:
    """Run the pending layout requests now (a top-level widget grows to its layout's minimum there)."""
    qapp.sendPostedEvents(None, QEvent.Type.LayoutRequest)
    window.layout().activate()
    qapp.processEvents()


def assert_panel_fits(page) -> None:
    panel, area = page.settings, page.settings_dock.area
    assert panel.isVisible() and not area.horizontalScrollBar().isVisible()
    assert panel.width() >= panel.minimumSizeHint().width()  # given its width, not clipped on the right
    for button in panel.findChildren(QAbstractButton):
        if button.isVisible():  # as wide as its text asks: never "De" for Delete
            assert button.width() >= button.sizeHint().width(), button.text()
    heights = {field.height() for field in panel.number_fields()}
    assert len(heights) == 1, f"number fields of different heights: {heights}"


@pytest.fixture
def chat_at_900(qtbot, qapp):
    """The real window at 900x600 on its Chat page; shut down after the test."""
    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    shell = build_shell(paths, store, store.load().model_copy(update={"measure_bandwidth_on_start": False}))
    window = shell.window
    qtbot.addWidget(window)
    try:
        window.resize(900, 600)
        window.show()
        window.show_page("chat")
        qtbot.waitExposed(window)
        settle(qapp, window)
        yield window
    finally:
        shell.shutdown()


def test_at_900_by_600_the_panel_takes_the_threads_place_and_the_window_keeps_its_width(chat_at_900, qapp):
    window = chat_at_900
    assert window.width() == 900
    page = window.page("chat")
    page.header.settings_button.click()
    settle(qapp, window)
    assert window.width() == 900, "opening the settings must not grow the window"
    assert not page.settings_dock.beside and not page.thread_view.isVisible()
    assert_panel_fits(page)
    page.header.settings_button.click()
    settle(qapp, window)
    assert window.width() == 900 and not page.settings.isVisible() and page.thread_view.isVisible()


def test_on_a_wide_window_the_panel_sits_beside_the_chat(make_chat, qtbot, qapp):
    _h, page = make_chat()
    page.resize(1400, 750)
    settle(qapp, page)
    page.header.settings_button.click()
    settle(qapp, page)
    assert page.width() == 1400 and page.settings_dock.beside and page.thread_view.isVisible()
    assert_panel_fits(page)
    page.resize(700, 750)  # narrowed with the panel open: it moves into the thread's place
    settle(qapp, page)
    assert page.width() == 700 and not page.settings_dock.beside and not page.thread_view.isVisible()
    assert_panel_fits(page)


def test_a_load_in_progress_never_widens_the_model_bar(make_chat, qtbot, qapp):
    """The busy bar shows beside the status line: in the button row it raised the window's minimum width,
    and the window grew by it for good."""
    from app.core.runtime.jobs import HostState

    _h, page = make_chat(load=False)
    bar = page.model_bar
    idle = bar.minimumSizeHint().width()
    bar.host_state(HostState(status="loading"))
    settle(qapp, page)
    assert bar.progress.isVisible() and bar.minimumSizeHint().width() <= idle


def test_at_900_px_the_title_keeps_room_beside_the_context_reading(chat_at_900, qapp):
    """The title was cut to "Rev…" by the meter and the Settings button; the reading is short beside its
    caption, its whole words in the tooltip."""
    window = chat_at_900
    header = window.page("chat").header
    header.title.setText("Reverse a string in Python")
    header.meter.show_usage(1_000, 131_072)  # room kept for the widest reading this context gives
    settle(qapp, window)
    assert window.width() == 900
    assert header.title.width() >= header.title.fontMetrics().horizontalAdvance("Reverse a string")
    assert "tokens used" in header.meter.bar.toolTip()


def test_a_panel_never_opened_is_deleted_with_its_page(qtbot, make_chat):
    """Held by the chat column until placed: a closed page leaves no scroll area behind (every widget left alive is
    restyled at each theme change, and the app's windows come and go in a session of tests)."""
    import shiboken6

    from app.core.chat.store import ChatStore
    from app.ui.chat import ChatPage

    h, _page = make_chat(load=False)
    store = ChatStore(h.db)
    page = ChatPage(h.host, store, None, h.tasks, tools=h.tools)  # not the harness's: this test deletes it
    area = page.settings_dock.area
    assert not page.settings_dock.is_open and area.parent() is not None and not area.isVisible()
    page.shutdown()
    store.close()
    page.deleteLater()
    qtbot.waitUntil(lambda: not shiboken6.isValid(area), timeout=5_000)
