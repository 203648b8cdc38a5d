"""Issue 46 item 10: offline is found at start, not by accident. The start's check (on the pool, through
HubClient) shows the banner before any search; Download is off with the reason while the Hub is out of reach;
a download that failed says why beside its Retry; the Hub back, Download comes back."""

from __future__ import annotations

import threading

from app.core.downloads.items import DownloadItem, RemoteFile, State
from app.core.library.download_view import OFFLINE_WHY, button_view
from app.ui.download_button import OFFLINE_NOTE
from tests.ui.hub_gui_fixtures import env, pool_tasks  # noqa: F401
from tests.ui.test_discover_polish import ranked, settle, wired  # noqa: F401


def test_an_offline_start_shows_the_banner_at_once_and_download_waits_with_the_reason(qtbot, wired, fake_hub):  # noqa: F811
    page, _panel, url = wired
    page.show()
    ranked(qtbot, page)
    card, banner = page.start_here, page.offline_banner
    assert card.button.button.text() == "Download" and card.button.button.isEnabled()
    on_ui = threading.current_thread()
    asked_on: list[threading.Thread] = []
    hub = page._hub
    page._hub = lambda: asked_on.append(threading.current_thread()) or hub()  # type: ignore[func-returns-value]
    page.check_hub()  # what main.py does once the window is filled: no search, no Download clicked
    qtbot.waitUntil(banner.isVisible, timeout=20_000)
    assert asked_on and all(t is not on_ui for t in asked_on)  # the Hub is asked on the pool
    assert not page.search.searched  # found without a search
    button = card.button.button
    assert button.text() == "Download" and not button.isEnabled()
    assert OFFLINE_WHY in button.toolTip() and OFFLINE_WHY in card.button.toolTip()
    # The network back: the banner's Retry asks again, and Download is offered again.
    url["now"] = fake_hub.url
    banner.retry.click()
    qtbot.waitUntil(lambda: not banner.isVisible(), timeout=20_000)
    assert button.text() == "Download" and button.isEnabled() and not button.toolTip()


def test_a_failed_download_says_why_beside_its_retry(qtbot, wired):  # noqa: F811
    page, _panel, _url = wired
    page.show()
    ranked(qtbot, page)
    feed, card = page.feed, page.start_here
    variant = card.pick.best.variant
    item = DownloadItem("i1", variant.repo_id, "", "main", variant.label, [RemoteFile("x.gguf", 100)], variant.repo_id)
    item.state, item.error = State.FAILED, "The download of x.gguf stopped: the disk is full"
    feed._on_item(item)  # as the manager reports it (through its EventBridge)
    settle()
    assert card.button.button.text() == "Retry" and card.button.button.isEnabled()
    assert card.error.isVisible() and "the disk is full" in card.error.text()
    # A download that lost the Hub: the note says so in two words, the banner says the rest, Retry waits.
    item.error = "You are offline: can't reach the Hub. Check the network and retry."
    feed._on_item(item)
    settle()
    assert page.offline_banner.isVisible() and feed.offline
    assert card.error.text() == OFFLINE_NOTE + "." and not card.button.button.isEnabled()


def test_the_button_view_offline_turns_off_what_needs_the_hub():
    item = DownloadItem("i2", "org/m", "", "main", "Q4", [RemoteFile("m.gguf", 100)], "org/m")
    item.state, item.error = State.FAILED, "Connection reset by the mirror after 3 tries"
    view = button_view(item, None, None)
    assert (view.text, view.enabled) == ("Retry", True) and view.error
    offline = button_view(item, None, None, offline=True)
    assert (offline.text, offline.enabled, offline.error) == ("Retry", False, view.error)
    assert offline.tooltip.endswith(OFFLINE_WHY)
    fresh = button_view(None, None, None, offline=True)
    assert (fresh.text, fresh.enabled, fresh.tooltip, fresh.error) == ("Download", False, OFFLINE_WHY, "")
