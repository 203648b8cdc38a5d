"""Issue 33 on Discover: errors as wrapped sentences, offline said once (a banner with Retry), a 'Start here'
that keeps its place and is not listed twice, slow picks that say so, and a grey MLX Download that says why."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QPoint
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.core.hub.client import HubClient
from app.core.library import ModelFile
from app.core.library.from_downloads import LibraryFeed
from app.core.models.catalog import ranked_catalog
from app.core.models.devices import machine_from_profile
from app.ui.discover.discover_page import DiscoverPage
from app.ui.discover.recommended import RecommendedList
from app.ui.discover.start_here import WAITING_NAME
from app.ui.discover.variants_table import VariantsTable
from app.ui.download_button import DownloadFeed
from app.ui.downloads_panel import DownloadsPanel
from app.ui.widgets.message_label import MessageLabel, as_sentences, capitalised
from app.ui.widgets.offline_banner import OFFLINE_TEXT
from app.ui.widgets.slow_speed import READING_SPEED_TOK_S, is_slow
from tests.fakehub.repos import gguf_with_data
from tests.ui.hub_gui_fixtures import GiB, blob, env, machine, pool_tasks, profile  # noqa: F401
from tests.ui.test_layout_fit import LONG_ERROR

CLOSED = "http://127.0.0.1:9"  # nothing listens there: the Hub cannot be reached
MACHINE = profile(ram_total=16 * GiB, ram_free=12 * GiB, bw=60.0)


@pytest.fixture
def wired(qtbot, fake_hub, env):  # noqa: F811
    """Discover, the Downloads page and the DownloadFeed wired as build_shell wires them, on a Hub whose
    address the test can switch between the closed port and the fake Hub."""
    url = {"now": CLOSED}

    def hub() -> HubClient:
        return HubClient(url["now"], None)

    manager = env.manager()
    library_feed = LibraryFeed(manager, env.library)
    panel = DownloadsPanel(manager, env.tasks, hub=hub)
    qtbot.addWidget(panel)
    feed = DownloadFeed(panel, env.library, env.tasks, parent=panel)
    page = DiscoverPage(env.tasks, hub=hub)
    qtbot.addWidget(page)
    page.download_requested.connect(panel.request_download)
    page.set_feed(feed)
    page.resize(700, 900)
    yield page, panel, url
    library_feed._unsubscribe()
    manager.close()


def settle() -> None:
    for _ in range(3):
        QCoreApplication.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)


def ranked(qtbot, page: DiscoverPage) -> None:
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(MACHINE)
    settle()


def test_errors_read_as_capitalised_sentences():
    core = "can't reach the Hub at https://huggingface.co; check your connection or mirror"
    assert as_sentences(core) == "Can't reach the Hub at https://huggingface.co. Check your connection or mirror."
    assert as_sentences("the Hub had a problem (HTTP 503); try again later.") == (
        "The Hub had a problem (HTTP 503). Try again later."
    )
    # A name as written is not "corrected": a repo id or a tool keeps its case.
    assert capitalised("org/Nope: no such model on the Hub") == "org/Nope: no such model on the Hub"
    assert capitalised("llama.cpp failed") == "llama.cpp failed" and capitalised("could not") == "Could not"


def test_a_long_unbroken_error_wraps_instead_of_widening(qtbot):
    box = QWidget()
    qtbot.addWidget(box)
    label = MessageLabel(LONG_ERROR)
    QVBoxLayout(box).addWidget(label)
    assert label.text() == LONG_ERROR  # the message as given; only what is painted holds break points
    assert box.minimumSizeHint().width() < 200
    box.resize(300, 400)
    box.show()
    settle()
    assert label.height() > 4 * label.fontMetrics().lineSpacing()  # it wrapped onto several lines


def test_offline_is_said_once_by_a_banner_and_retry_brings_the_downloads_back(qtbot, wired, fake_hub):
    page, _panel, url = wired
    page.show()
    ranked(qtbot, page)
    card, banner = page.start_here, page.offline_banner
    assert card.isVisible() and not banner.isVisible()
    card.button.button.click()  # Download, with the Hub out of reach
    qtbot.waitUntil(lambda: banner.isVisible(), timeout=20_000)
    assert banner.message.text() == OFFLINE_TEXT
    # The button offers Retry once the Hub is back and says why on hover; the card says in two words why
    # the download failed (issue 46: a Retry with no reason), the banner says the rest.
    qtbot.waitUntil(lambda: card.button.button.text() == "Retry", timeout=5_000)
    assert card.button.button.toolTip().startswith("Can't reach the Hub at ")
    assert not card.button.button.isEnabled()  # offline: nothing to retry until the Hub answers
    assert card.error.text() == "Failed: offline." and card.button.note.isHidden()
    with qtbot.waitSignal(page.search.search_failed, timeout=20_000):
        page.search.search()
    assert page.search.status.text() == "Search needs a connection to Hugging Face."
    assert page.search.view.isHidden()  # no empty results box
    url["now"] = fake_hub.url  # the network is back
    with qtbot.waitSignal(page.search.results_ready, timeout=20_000):  # Retry runs the failed search again
        banner.retry.click()
    assert not banner.isVisible() and banner.retry.isEnabled()
    assert card.button.button.text() == "Download" and not card.button.button.toolTip()


def test_another_download_error_wraps_across_the_start_here_card(qtbot, wired):
    page, panel, _url = wired
    page.show()
    ranked(qtbot, page)
    card = page.start_here
    panel.request_finished.emit(card.pick.best.variant, LONG_ERROR)
    settle()
    assert card.button.button.text() == "Retry" and not page.offline_banner.isVisible()
    assert card.error.isVisible() and card.error.text() == LONG_ERROR + "."
    assert card.error.width() > card.button.width()  # across the card, not squeezed beside the button


def test_start_here_keeps_its_place_from_the_first_view(qtbot, wired, themed):
    page, _panel, _url = wired
    page.show()
    card = page.start_here
    qtbot.waitUntil(lambda: card.isVisible(), timeout=5_000)  # once the library is read, before any ranking
    settle()
    assert card.name.text() == WAITING_NAME and not card.button.button.isEnabled()
    search_at, card_height = page.search.mapTo(page, QPoint(0, 0)), card.height()
    search_width = page.search.width()
    ranked(qtbot, page)
    assert card.pick is not None and card.pick.model.name in card.name.text()
    # Nothing moves: the search box neither down (the card's height) nor narrower (a new scroll bar).
    assert page.search.mapTo(page, QPoint(0, 0)) == search_at and card.height() == card_height
    assert page.search.width() == search_width


def test_the_start_here_pick_is_not_listed_again_below(qtbot, wired, env):  # noqa: F811
    page, _panel, _url = wired
    page.show()
    ranked(qtbot, page)
    shown = page.start_here.pick
    listed = [row.pick.model.name for row in page.recommended.visible_rows()]
    assert shown.model.name not in listed and len(listed) == len(page.picks) - 1
    data = gguf_with_data(1 << 20, blob(1 << 20, 3))  # a ready model: 'Start here' steps aside
    path = env.models / "org" / "ready.gguf"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    env.library.add_download(
        repo_id="org/ready", commit="", format="gguf", quant="Q8_0", files=[ModelFile(path, len(data))]
    )
    qtbot.waitUntil(lambda: not page.start_here.isVisible(), timeout=5_000)
    assert shown.model.name in [row.pick.model.name for row in page.recommended.visible_rows()]


def test_a_pick_slower_than_reading_speed_says_so_and_is_not_urged(qtbot):
    assert is_slow(READING_SPEED_TOK_S - 0.1) and not is_slow(READING_SPEED_TOK_S) and not is_slow(None)
    slow_machine = machine_from_profile(profile(ram_total=64 * GiB, ram_free=60 * GiB, bw=8.0))
    cards = RecommendedList()
    qtbot.addWidget(cards)
    cards.set_picks(ranked_catalog(slow_machine))
    runs = [r for r in cards.rows if r.pick.best is not None and r.pick.best.speed is not None]
    slow = [r for r in runs if r.pick.best.speed.decode_tok_s < READING_SPEED_TOK_S]
    quick = [r for r in runs if r.pick.best.speed.decode_tok_s >= READING_SPEED_TOK_S]
    assert slow and quick
    for row in slow:
        assert row.badge.text().startswith("Slow on this machine: ~") and row.badge.text().endswith(" tok/s")
        assert row.download.property("role") != "primary"
    for row in quick:
        assert not row.badge.text().startswith("Slow") and row.download.property("role") == "primary"


def test_a_grey_mlx_download_says_why(qtbot, machine):  # noqa: F811
    pick = next(
        p for p in ranked_catalog(machine) if any(a.variant.format == "mlx" for a in p.recommendation.assessments)
    )
    table = VariantsTable()
    qtbot.addWidget(table)
    table.set_assessments(pick.recommendation.assessments)
    rows = {a.variant.format: i for i, a in enumerate(table.assessments)}
    grey, usable = table.download_widget(rows["mlx"]), table.download_widget(rows["gguf"])
    assert not grey.button.isEnabled() and usable.button.isEnabled()  # on Linux
    assert grey.button.toolTip().startswith("MLX models cannot run on this machine: MLX runs only on Apple Silicon")
    assert grey.toolTip() == grey.button.toolTip()  # anywhere in the cell, as a disabled button may not hover
    assert not usable.button.toolTip() and not usable.toolTip()


def test_a_download_error_wraps_across_a_recommended_card(qtbot, wired):
    page, panel, _url = wired
    page.show()
    ranked(qtbot, page)
    row = next(r for r in page.recommended.rows if r.isVisible() and r.pick.best is not None)
    panel.request_finished.emit(row.pick.best.variant, LONG_ERROR)
    settle()
    assert row.download.text() == "Retry" and not row.download_widget.note.isVisible()
    assert row.error.isVisible() and row.error.text() == LONG_ERROR + "."  # the whole message, not "The Hub …"
    assert row.error.width() > row.download.width()


def test_a_format_column_shows_only_when_the_formats_differ(qtbot):
    from app.core.models.recommend import Variant, assess
    from app.ui.discover.variants_table import FORMAT_COLUMN
    from tests.core.models.synthetic import llama3_8b_spec

    spec = llama3_8b_spec()
    big = machine_from_profile(profile(ram_total=64 * GiB, ram_free=60 * GiB))
    table = VariantsTable()
    qtbot.addWidget(table)
    gguf = [Variant(q, "gguf", spec.weight_bytes, spec=spec) for q in ("Q4_K_M", "Q8_0")]
    table.set_assessments(assess(gguf, big).assessments)
    assert table.isColumnHidden(FORMAT_COLUMN)  # "GGUF" on every row says nothing
    table.set_assessments(assess([*gguf, Variant("4bit", "mlx", spec.weight_bytes, spec=spec)], big).assessments)
    assert not table.isColumnHidden(FORMAT_COLUMN)


def test_a_variant_that_downloads_a_projector_says_it_sees_images(qtbot):
    from app.core.models.recommend import Variant, assess
    from tests.core.models.synthetic import llama3_8b_spec

    spec = llama3_8b_spec()
    big = machine_from_profile(profile(ram_total=64 * GiB, ram_free=60 * GiB))
    table = VariantsTable()
    qtbot.addWidget(table)
    seeing = Variant("Q4_K_M", "gguf", spec.weight_bytes, spec=spec, files=["m-Q4_K_M.gguf", "mmproj-m-F16.gguf"])
    text = Variant("Q8_0", "gguf", spec.weight_bytes, spec=spec, files=["m-Q8_0.gguf"])
    table.set_assessments(assess([seeing, text], big).assessments)
    by_label = {table.item(r, 0).text().lstrip("★ "): table.item(r, 0).toolTip() for r in range(table.rowCount())}
    assert by_label["Q4_K_M · Vision"] == "Sees images: its vision projector (mmproj-m-F16.gguf) downloads with it"
    assert "Q8_0" in by_label and "Vision" not in by_label["Q8_0"]
    mlx = Variant("4bit", "mlx", spec.weight_bytes, spec=spec, files=["config.json"], mlx_vision=True)
    table.set_assessments(assess([mlx, text], big).assessments)
    tips = {table.item(r, 0).text().lstrip("★ "): table.item(r, 0).toolTip() for r in range(table.rowCount())}
    assert tips["4bit · Vision"] == "Sees images: mlx-vlm reads the vision half of this checkpoint"
