"""Issue 13, Discover fixes: filters re-run the search, one click opens a result, the model page follows
the starred pick and the context slider, catalogue pages ask the Hub, the layout keeps the variants in view."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.hub.client import HubClient
from app.core.units import fmt_bytes
from app.ui.discover.discover_page import DiscoverPage
from app.ui.theme import verdict_colours
from app.ui.widgets.fit_view import fmt_rate
from tests.fakehub import gguf_repo, mlx_repo
from tests.ui.hub_gui_fixtures import env, machine, pool_tasks  # noqa: F401


@pytest.fixture
def discover(qtbot, env, machine):  # noqa: F811
    page = DiscoverPage(env.tasks, ranker=lambda m: [], hub=env.hub)
    page.machine = machine
    qtbot.addWidget(page)
    return page


def test_changing_the_format_re_runs_the_search_and_all_formats_has_no_filter(qtbot, fake_hub, discover):
    fake_hub.add_repo(gguf_repo("org/Llama-GGUF"))
    fake_hub.add_repo(mlx_repo("mlx-community/Llama-mlx"))
    search = discover.search
    with qtbot.assertNotEmitted(search.results_ready, wait=0):  # no search made yet: nothing to re-run
        search.format.setCurrentIndex(search.format.findData("mlx"))
    assert search.model.rowCount() == 0
    search.format.setCurrentIndex(search.format.findData("gguf"))
    search.query.setText("llama")
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.search()
    assert got.args[0] == 1 and search.model.results[0].id == "org/Llama-GGUF"
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.format.setCurrentIndex(search.format.findData("mlx"))
    assert [r.id for r in search.model.results] == ["mlx-community/Llama-mlx"]
    everything = search.format.findText("All formats")
    assert everything >= 0 and search.format.itemData(everything) is None
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.format.setCurrentIndex(everything)
    assert got.args[0] == 2
    assert {r.id for r in search.model.results} == {"org/Llama-GGUF", "mlx-community/Llama-mlx"}
    asked = [r for r in fake_hub.requests("GET", "/api/models") if "search" in r.query]
    assert "filter" not in asked[-1].query  # All formats: one query, no format filter


def test_one_click_on_a_result_opens_it_once(qtbot, fake_hub, discover):
    fake_hub.add_repo(gguf_repo("org/Llama-GGUF"))
    discover.resize(900, 700)
    discover.show()
    qtbot.waitExposed(discover)
    search = discover.search
    search.query.setText("llama")
    with qtbot.waitSignal(search.results_ready, timeout=10_000):
        search.search()
    # The row's size is asked of the Hub too: let that answer first, so only opening counts below.
    qtbot.waitUntil(lambda: "org/Llama-GGUF" in search.model.fits, timeout=10_000)
    rect = search.view.visualRect(search.model.index(0))
    asked = len(fake_hub.requests("GET", "/api/models/org/Llama-GGUF"))
    opened = []
    discover.search.open_requested.connect(opened.append)
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000):
        qtbot.mouseClick(search.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert opened == ["org/Llama-GGUF"] and discover.stack.currentIndex() == 1
    one_open = len(fake_hub.requests("GET", "/api/models/org/Llama-GGUF")) - asked
    # A double-click (clicked, then activated) asks twice while the page loads: it is fetched once.
    discover.stack.setCurrentIndex(0)
    asked += one_open
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000):
        search.open_row(0)
        search.open_row(0)
    assert discover.stack.currentIndex() == 1
    assert len(fake_hub.requests("GET", "/api/models/org/Llama-GGUF")) - asked == one_open


@pytest.fixture
def catalogue(qtbot, pool_tasks):  # noqa: F811
    from tests.ui.hub_gui_fixtures import GiB, profile

    page = DiscoverPage(pool_tasks, hub=lambda: HubClient("http://127.0.0.1:9", None))  # nothing listens there
    qtbot.addWidget(page)
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    return page


def test_the_fit_view_follows_the_starred_pick_when_a_page_opens(qtbot, catalogue):
    view = catalogue.model_view
    opened = 0
    for pick in catalogue.picks:
        if pick.best is None or pick.best is pick.recommendation.assessments[0]:
            continue
        catalogue.open_pick(pick)
        opened += 1
        assert view.fit_view is not None and view.fit_view.spec is pick.best.spec, pick.model.name
        assert view.table.selectedIndexes()[0].row() == view.table.recommended_row()
    assert opened >= 2


def test_the_context_slider_updates_the_tables_context_and_speed(qtbot, catalogue):
    from tests.ui.hub_gui_fixtures import GiB, profile

    # An 8 GB card: 8B quants run on the GPU at 8k context, and spill to the CPU (slower) at 32k.
    with qtbot.waitSignal(catalogue.picks_ready, timeout=10_000):
        catalogue.set_profile(profile(gpus=[("NVIDIA GeForce RTX 4060", 8 * GiB, 7 * GiB, 272)]))
    pick = next(p for p in catalogue.picks if p.model.name.startswith("Llama 3.1 8B"))
    catalogue.open_pick(pick)
    view = catalogue.model_view
    fit, table = view.fit_view, view.table
    assert fit is not None
    star = table.recommended_row()
    runnable = [i for i, a in enumerate(table.assessments) if a.fits]
    assert star in runnable and all(table.row_text(i)[4] == "8,192" for i in runnable)
    speeds = {i: table.assessments[i].speed.decode_tok_s for i in runnable}
    with qtbot.waitSignal(fit.plan_changed, timeout=2000):
        fit.slider.setValue(fit.context_steps.index(32768))
    assert view.fit_view is fit  # the view being used is kept, not rebuilt
    fitting = [i for i, a in enumerate(table.assessments) if a.fits]
    assert fitting and all(table.row_text(i)[4] == f"{table.assessments[i].plan.options.n_ctx:,}" for i in fitting)
    assert any(table.row_text(i)[4] == "32,768" for i in fitting)
    # A longer context reads a bigger KV cache every token: slower, and the column says so.
    slower = [i for i in fitting if i in speeds and table.assessments[i].speed.decode_tok_s < speeds[i]]
    assert slower and all(table.row_text(i)[5] == fmt_rate(table.assessments[i].speed.decode_tok_s) for i in slower)
    assert table.selectedIndexes()[0].row() == star  # the selected variant stays selected


def test_the_recommended_list_says_why_it_is_ordered_so(catalogue):
    status = catalogue.recommended.status.text()
    assert "catalogue models run on this machine" in status
    assert "Most capable first" in status and "comfortable speed (≥ 10 tok/s)" in status
    assert "fastest first" in status and "will not fit come last" in status


def test_a_long_model_card_sits_below_the_variants_and_scrolls_with_the_page(qtbot, fake_hub, discover):
    card = "# A long card\n\n" + "\n\n".join(f"Paragraph {i}: " + "words " * 40 for i in range(60))
    fake_hub.add_repo(gguf_repo("org/Long-GGUF", quants=("F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"), card=card))
    discover.resize(900, 600)
    discover.show()
    qtbot.waitExposed(discover)
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000):
        discover.open_repo("org/Long-GGUF")
    view = discover.model_view
    qtbot.waitUntil(view.card.isVisible, timeout=5_000)
    table = view.table
    assert len(table) == 5
    # Every row of the table shows: the table is not squeezed to make room for the card.
    rows = sum(table.rowHeight(i) for i in range(len(table)))
    qtbot.waitUntil(lambda: table.viewport().height() >= rows, timeout=2_000)
    # The card is as tall as its text (no scroll bar of its own) and below the table; the page scrolls.
    qtbot.waitUntil(lambda: view.card.height() >= view.card.document().size().height(), timeout=2_000)
    assert view.card.verticalScrollBar().maximum() == 0
    assert view.card.y() > table.y() + table.height()
    assert view.page_scroll.verticalScrollBar().maximum() > 0


LLAMA_8B = "Llama 3.1 8B"


@pytest.fixture
def catalogue_online(qtbot, env, machine):  # noqa: F811
    page = DiscoverPage(env.tasks, hub=env.hub)
    qtbot.addWidget(page)
    from tests.ui.hub_gui_fixtures import GiB, profile

    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    return page


def test_a_catalogue_page_asks_the_hub_for_real_sizes_the_card_and_a_link(
    qtbot, fake_hub, catalogue_online, quant_files
):
    page = catalogue_online
    pick = next(p for p in page.picks if p.model.name.startswith(LLAMA_8B))
    repo_id = pick.best.variant.repo_id
    card = "# The real card\n\nFrom the Hub."
    fake_hub.add_repo(
        gguf_repo(
            repo_id, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes(), card=card
        )
    )
    view = page.model_view
    estimated = {a.variant.label: a.variant.size_bytes for a in pick.recommendation.assessments}
    with qtbot.waitSignal(page.repo_ready, timeout=30_000) as got:
        page.open_pick(pick)
        # Until the Hub answers, the catalogue's estimates are shown, and the page says it is asking.
        assert len(view.table) == len(pick.recommendation.assessments)
        assert "asking the Hub" in view.subtitle.text()
    assert got.args[0].repo_id == repo_id
    assert view.title.text() == pick.model.name and "estimated" not in view.subtitle.text()
    real = {a.variant.label: a for a in view.table.assessments if a.variant.repo_id == repo_id}
    assert set(real) == {"F16", "Q8_0"}
    assert real["Q8_0"].variant.size_bytes == quant_files["Q8_0"].stat().st_size != estimated.get("Q8_0")
    assert all(a.spec is not None and a.spec.n_ctx_train == 4096 for a in real.values())  # the real headers
    others = [a for a in view.table.assessments if a.variant.repo_id != repo_id]
    assert others and {a.variant.format for a in others} <= {"mlx", "exl2"}  # other repos stay estimated
    assert not view.card.isHidden() and "The real card" in view.card.toPlainText()
    assert f'href="{fake_hub.url}/{repo_id}"' in view.source.text() and view.source.openExternalLinks()


def test_a_catalogue_page_offline_keeps_the_estimates_with_a_note(qtbot, fake_hub, catalogue_online):
    page = catalogue_online
    pick = next(p for p in page.picks if p.model.name.startswith(LLAMA_8B))
    fake_hub.close()
    view = page.model_view
    with qtbot.waitSignal(page.repo_failed, timeout=30_000):
        page.open_pick(pick)
    assert [a.variant.label for a in view.table.assessments] == [
        a.variant.label for a in pick.recommendation.assessments
    ]
    # Offline is said once, by the page's banner; the notice says what it means for this page.
    assert page.offline_banner.isVisibleTo(page) and "You're offline" in page.offline_banner.message.text()
    assert "estimates from Hearth's catalogue" in view.notice.text() and "can't reach" not in view.notice.text()
    assert not view.notice.isHidden() and view.source.isHidden()
    assert "sizes estimated" in view.subtitle.text() and "asking" not in view.subtitle.text()


def test_search_results_show_size_and_fit_for_the_first_rows_once_and_cached(
    qtbot,
    fake_hub,
    discover,
    machine,  # noqa: F811
    quant_files,
):
    from app.ui.discover.search import FIT_ROWS

    for i in range(FIT_ROWS + 3):
        fake_hub.add_repo(
            gguf_repo(
                f"org/Tiny{i:02d}-GGUF",
                quants=("F16", "Q8_0"),
                split=None,
                make_gguf=lambda q: quant_files[q].read_bytes(),
                downloads=1000 - i,
            )
        )
    search = discover.search
    search.set_machine(machine)
    search.query.setText("tiny")
    with qtbot.waitSignal(search.results_ready, timeout=10_000):
        search.search()
    model = search.model
    assert model.rowCount() == FIT_ROWS + 3
    size = quant_files["Q8_0"].stat().st_size
    qtbot.waitUntil(lambda: len(model.fits) == FIT_ROWS, timeout=30_000)
    first = model.data(model.index(0))
    assert f"Q8_0 {fmt_bytes(size)} · Runs on the CPU" in first.splitlines()[1]
    badge = model.data(model.index(0), Qt.ItemDataRole.DecorationRole)
    assert badge is not None and badge.toImage().pixelColor(5, 5).name() == verdict_colours("cpu")[0].name()
    # Bounded: the rows past FIT_ROWS are never asked about (their row shows no size).
    asked = {r.path.split("/")[4] for r in fake_hub.requests("GET", "/api/models/org/")}
    assert asked == {f"Tiny{i:02d}-GGUF" for i in range(FIT_ROWS)}
    assert model.data(model.index(FIT_ROWS, 0)).count("·") == first.count("·") - 2
    # The same search again is answered from the cache: no more Hub calls about the repos.
    before = len(fake_hub.requests("GET", "/api/models/org/"))
    with qtbot.waitSignal(search.results_ready, timeout=10_000):
        search.search()
    assert len(model.fits) == FIT_ROWS and len(fake_hub.requests("GET", "/api/models/org/")) == before


def test_the_download_column_is_no_wider_than_its_button(qtbot, catalogue):
    catalogue.resize(1280, 800)
    catalogue.show()
    catalogue.open_pick(catalogue.picks[0])
    table = catalogue.model_view.table
    qtbot.waitUntil(lambda: table.rowCount() > 0)
    last = table.columnCount() - 1
    button = table.cellWidget(0, last)
    assert table.columnWidth(last) <= button.sizeHint().width() + 24  # no stretch into a wide bar
    assert table.columnWidth(3) > table.columnWidth(last)  # the Fit explanation takes the spare width
