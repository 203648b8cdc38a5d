"""Download feedback where the user clicked (Discover's buttons), and from a finished download to a chat."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt

from app.core.downloads.items import DownloadItem, Progress, RemoteFile, State
from app.core.library import ModelFile
from app.core.library.download_view import button_view, short_error
from app.core.library.from_downloads import LibraryFeed
from app.core.models.catalog import ranked_catalog
from app.core.models.recommend import Assessment, Variant
from app.ui.discover.discover_page import DiscoverPage
from app.ui.discover.recommended import RecommendedList
from app.ui.discover.variants_table import VariantsTable
from app.ui.download_button import DownloadFeed
from app.ui.downloads_panel import DownloadsPanel
from tests.fakehub import FakeRepo, Fault
from tests.fakehub.repos import gguf_with_data
from tests.ui.hub_gui_fixtures import GiB, blob, env, machine, pool_tasks, profile  # noqa: F401

REPO = "org/feed"
SIZE = 1 << 20
DATA = gguf_with_data(SIZE, blob(SIZE, 3))  # a real GGUF: the library takes only those as models
VARIANT = Variant(label="big", format="gguf", size_bytes=SIZE, repo_id=REPO, revision="main", files=["big.gguf"])


def assess(v: Variant) -> Assessment:
    return Assessment(variant=v, plan=None, speed=None, kld=None, runnable=True)


@pytest.fixture
def wired(qtbot, fake_hub, env):  # noqa: F811
    """The Downloads page, the library feed and a DownloadFeed on the fake Hub, as build_shell wires them."""
    fake_hub.add_repo(FakeRepo(REPO, files={"big.gguf": DATA}))
    manager = env.manager()
    library_feed = LibraryFeed(manager, env.library)
    panel = DownloadsPanel(manager, env.tasks, hub=env.hub)
    qtbot.addWidget(panel)
    feed = DownloadFeed(panel, env.library, env.tasks, parent=panel)
    qtbot.waitUntil(lambda: feed.models_loaded, timeout=5_000)
    table = VariantsTable()
    qtbot.addWidget(table)
    table.set_feed(feed)
    table.download_requested.connect(panel.request_download)
    yield feed, table, panel
    library_feed._unsubscribe()
    manager.close()


def add_to_library(env, repo_id: str, quant: str):  # noqa: F811
    path = env.models / repo_id / f"{quant}.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(DATA)
    return env.library.add_download(
        repo_id=repo_id, commit="", format="gguf", quant=quant, files=[ModelFile(path, len(DATA))]
    )


def test_the_button_maps_states_to_what_it_shows():
    item = DownloadItem("i1", REPO, "", "main", "big", [RemoteFile("big.gguf", 100)], REPO)
    assert button_view(None, None, None).text == "Download"
    assert button_view(None, None, None, can_download=False, why_not="gated").tooltip == "gated"
    assert button_view(None, None, None, preparing=True).text == "Preparing…"
    item.state = State.ACTIVE
    p = Progress("i1", "big.gguf", 42, 100, 3.1 * (1 << 20), 1.0, 42, 100, 3.1 * (1 << 20), 1.0)
    view = button_view(item, p, None)
    assert (view.text, view.enabled, view.action) == ("42 % · 3.1 MiB/s", False, "none")
    item.state, item.error = State.FAILED, "You are offline: can't reach the Hub. Check the network and retry."
    view = button_view(item, None, None)
    assert (view.text, view.action, view.tooltip) == ("Retry", "retry", item.error)
    assert view.error == short_error(item.error) and len(view.error) <= 48
    item.state, item.error = State.PAUSED, "Not enough disk space for big: need 2 GiB, 1 GiB free"
    assert button_view(item, None, None).action == "resume"
    assert button_view(None, None, None, request_error="org/x: no such model on the Hub").action == "download"


def test_progress_in_place_then_downloaded_chat_opens_the_model_in_chat(qtbot, fake_hub, hf_env, monkeypatch):
    from app.core.paths import app_paths
    from app.core.settings import Settings, SettingsStore
    from app.main import build_shell

    fake_hub.add_repo(FakeRepo(REPO, files={"big.gguf": DATA}))
    fake_hub.faults.add("big.gguf", Fault.throttle(SIZE // 2))
    paths = app_paths().ensure()
    settings = Settings(hf_endpoint=fake_hub.url, measure_bandwidth_on_start=False)
    shell = build_shell(paths, SettingsStore(paths.settings_file), settings)
    try:
        w = shell.window
        qtbot.addWidget(w)
        discover, chat = w.page("discover"), w.page("chat")
        table = discover.model_view.table
        table.set_assessments([assess(VARIANT)])
        button = table.download_button(0)
        assert button.text() == "Download"
        button.click()
        # About two seconds at the fake Hub's throttled rate: the percent and speed show in place.
        qtbot.waitUntil(lambda: re.fullmatch(r"[1-9]\d? % · \d+\.\d \w+/s", button.text()) is not None, timeout=10_000)
        assert not button.isEnabled()
        qtbot.waitUntil(lambda: button.text() == "Downloaded — Chat", timeout=20_000)
        assert button.isEnabled()
        model = shell.services.library.find(f"{REPO}:big")
        assert model is not None and model.ready
        loads = []
        bar = chat.model_bar
        monkeypatch.setattr(bar, "load_selected", lambda: loads.append(bar.picker.currentData().id))
        button.click()
        assert w.current_page_key == "chat"
        qtbot.waitUntil(lambda: loads == [model.id], timeout=10_000)  # loaded through the ChatLauncher
        qtbot.waitUntil(lambda: not shell.tasks.busy, timeout=10_000)
    finally:
        shell.shutdown()


def test_a_request_error_shows_in_place_with_retry(qtbot, wired):
    _feed, table, _panel = wired
    gone = Variant(label="x", format="gguf", size_bytes=1, repo_id=REPO, revision="main", files=["gone.gguf"])
    table.set_assessments([assess(gone)])
    widget = table.download_widget(0)
    widget.button.click()
    qtbot.waitUntil(lambda: widget.button.text() == "Retry", timeout=10_000)
    assert widget.button.isEnabled() and "no longer has gone.gguf" in widget.button.toolTip()
    # The whole message goes under the table, where it wraps; beside the button it widened the column.
    assert widget.note.isHidden() and table.download_error_text().startswith("x: ")
    assert "no longer has gone.gguf" in table.download_error_text()


def test_a_failed_download_shows_in_place_and_retry_finishes_it(qtbot, fake_hub, wired):
    feed, table, _panel = wired
    fake_hub.faults.add("big.gguf", *[Fault.status_code(503) for _ in range(3)])  # every try of the first run
    table.set_assessments([assess(VARIANT)])
    widget = table.download_widget(0)
    widget.button.click()
    qtbot.waitUntil(lambda: widget.view.action == "retry", timeout=20_000)
    assert "Gave up downloading big.gguf" in table.download_error_text() and widget.button.text() == "Retry"
    assert widget.button.toolTip().startswith("Gave up downloading big.gguf after 3 failed attempts")
    widget.button.click()
    qtbot.waitUntil(lambda: widget.button.text() == "Downloaded — Chat", timeout=20_000)
    assert table.download_error_text() == ""
    chats = []
    feed.chat_requested.connect(chats.append)
    widget.button.click()
    assert [m.quant for m in chats] == ["big"]


def test_a_variant_already_in_my_models_offers_chat(qtbot, env, wired, machine):  # noqa: F811
    feed, table, _panel = wired
    picks = ranked_catalog(machine)
    best = picks[0].best
    assert best is not None and best.variant.repo_id and best.variant.format == "gguf"
    cards = RecommendedList()
    qtbot.addWidget(cards)
    cards.set_feed(feed)
    cards.set_picks(picks)
    table.set_assessments([assess(VARIANT)])
    assert cards.rows[0].download.text() == "Download" and table.download_button(0).text() == "Download"
    add_to_library(env, REPO, "big")
    add_to_library(env, best.variant.repo_id, best.variant.label)
    qtbot.waitUntil(lambda: table.download_button(0).text() == "In My Models — Chat", timeout=5_000)
    qtbot.waitUntil(lambda: cards.rows[0].download.text() == "In My Models — Chat", timeout=5_000)
    chats = []
    feed.chat_requested.connect(chats.append)
    cards.rows[0].download.click()
    assert [(m.repo_id, m.quant) for m in chats] == [(best.variant.repo_id, best.variant.label)]


def test_start_here_shows_on_an_empty_library_and_hides_once_a_model_is_ready(qtbot, env, wired):  # noqa: F811
    feed, _table, _panel = wired
    page = DiscoverPage(env.tasks, hub=env.hub)
    qtbot.addWidget(page)
    page.set_feed(feed)
    with qtbot.waitSignal(page.picks_ready, timeout=10_000) as got:
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    card = page.start_here
    first = next(p for p in got.args[0] if p.best is not None)
    assert card.isVisibleTo(page) and first.model.name in card.name.text()
    assert first.best.plan.label in card.detail.text() and "tok/s" in card.detail.text()
    assert card.button.button.text() == "Download" and card.button.button.isEnabled()
    requested = []
    page.download_requested.connect(requested.append)
    card.button.button.click()
    assert requested == [first.best]
    add_to_library(env, REPO, "big")  # another model becomes ready
    qtbot.waitUntil(lambda: not card.isVisibleTo(page), timeout=5_000)


def test_start_here_keeps_its_own_download_until_its_chat_is_used(qtbot, env, wired):  # noqa: F811
    feed, _table, _panel = wired
    page = DiscoverPage(env.tasks, hub=env.hub)
    qtbot.addWidget(page)
    page.set_feed(feed)
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    card = page.start_here
    best = card.pick.best
    card.button.button.click()  # its download is asked for (the Hub here has no such repo: recorded by hand)
    add_to_library(env, best.variant.repo_id, best.variant.label)
    qtbot.waitUntil(lambda: card.button.view.action == "chat", timeout=5_000)
    assert card.isVisibleTo(page) and card.button.button.text().endswith("— Chat")
    chats = []
    feed.chat_requested.connect(chats.append)
    card.button.button.click()
    assert [m.quant for m in chats] == [best.variant.label] and not card.isVisibleTo(page)


def test_tab_on_a_recommended_card_reaches_download_before_details(qtbot, machine):  # noqa: F811
    cards = RecommendedList()
    qtbot.addWidget(cards)
    cards.set_picks(ranked_catalog(machine))
    cards.show()
    row = cards.rows[0]

    def next_tab_stop(w):
        w = w.nextInFocusChain()
        while not (w.focusPolicy() & Qt.FocusPolicy.TabFocus and w.isVisibleTo(cards)):
            w = w.nextInFocusChain()
        return w

    assert next_tab_stop(row.download) is row.details  # then the card's Details
    assert next_tab_stop(row.details) is not row.download
    assert row.download.isEnabled()
