"""Issue 46 item 13: the Server page's request log has a place of its own, in view on a 900×600 window with
its newest row visible; a reader of older rows keeps them in place; a tool's Test result scrolls into view."""

from __future__ import annotations

import threading

from PySide6.QtCore import QPoint, QRect

from app.core.connect.probe import ProbeResult
from app.server.request_log import LoggedRequest
from tests.ui.test_server_page import make_env  # noqa: F401

WAIT_MS = 10_000


def visible_in(widget, page) -> QRect:
    """The part of `widget` the page shows (its rectangle in the page's coordinates, cut by every ancestor)."""
    rect = QRect(widget.mapTo(page, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not page:
        rect = rect.intersected(QRect(parent.mapTo(page, QPoint(0, 0)), parent.size()))
        parent = parent.parentWidget()
    return rect.intersected(page.rect())


def shown_at_900_by_600(qtbot, page) -> None:
    page.resize(900 - 196, 600 - 50)  # the window less the sidebar, the menu bar and the status bar
    page.show()
    qtbot.waitExposed(page)


def add(env, n: int, start: int = 0) -> None:
    def run() -> None:
        for i in range(start, start + n):
            env.api.log.add(LoggedRequest(1000.0 + i, "GET", f"/r/{i}", 200, 0.001))

    threading.Thread(target=run).start()


def test_the_log_is_in_view_with_its_newest_row_on_a_small_window(make_env, qtbot, themed):  # noqa: F811
    env = make_env()
    page, view = env.page, env.page.log_view
    shown_at_900_by_600(qtbot, page)
    assert page.page_scroll.verticalScrollBar().value() == 0  # nothing scrolled
    seen = visible_in(view.viewport(), page)
    assert seen.height() >= 4 * view.verticalHeader().defaultSectionSize(), seen  # rows, not a sliver
    add(env, 60)
    qtbot.waitUntil(lambda: view.log_model.rowCount() == 60, timeout=WAIT_MS)
    newest = view.visualRect(view.log_model.index(0, 0))
    assert view.log_model.record(0).path == "/r/59" and view.viewport().rect().contains(newest.center())
    # Scrolled down to read older rows: the rows read stay in place while newer ones come in above.
    view.scrollTo(view.log_model.index(40, 0))
    reading = view.rowAt(view.viewport().height() // 2)
    path = view.log_model.record(reading).path
    add(env, 5, start=60)
    qtbot.waitUntil(lambda: view.log_model.rowCount() == 65, timeout=WAIT_MS)
    assert view.log_model.record(view.rowAt(view.viewport().height() // 2)).path == path
    # Back at the top, the newest row shows as it comes.
    view.scrollToTop()
    add(env, 1, start=65)
    qtbot.waitUntil(lambda: view.log_model.record(0).path == "/r/65", timeout=WAIT_MS)
    assert view.verticalScrollBar().value() == 0


def test_a_tools_test_result_scrolls_into_view(make_env, qtbot, themed):  # noqa: F811
    env = make_env()
    page = env.page
    card = page.connect_card
    card._probe = lambda url, key, model, route: ProbeResult(route, True, 200, "Hi!", 0.1)
    shown_at_900_by_600(qtbot, page)
    bar = page.page_scroll.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0  # the settings scroll on a window this small
    assert visible_in(card.result, page).height() == 0  # the card's foot is below the fold
    card.test_button.click()
    qtbot.waitUntil(lambda: card.test_button.isEnabled(), timeout=WAIT_MS)
    assert card.result.text()
    qtbot.waitUntil(lambda: visible_in(card.result, page).height() == card.result.height(), timeout=WAIT_MS)
