import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core" / "models"))

from synthetic import GiB, profile

from app.core.hub.client import HubClient
from app.ui.discover.discover_page import DiscoverPage
from app.ui.tasks import TaskRunner


@pytest.fixture
def page(qtbot):
    pool = ThreadPoolExecutor(2)
    tasks = TaskRunner(pool)
    page = DiscoverPage(tasks, hub=lambda: HubClient("http://127.0.0.1:9", None))  # the Hub is never asked here
    qtbot.addWidget(page)
    yield page
    tasks.close()
    pool.shutdown(wait=True)


def test_recommended_models_ranked_for_this_machine(page, qtbot):
    with qtbot.waitSignal(page.picks_ready, timeout=10_000) as got:
        page.set_profile(profile(gpus=[("NVIDIA GeForce RTX 4090", 24 * GiB, 23 * GiB, 1008)]))
    picks = got.args[0]
    rows = page.recommended.rows
    assert len(rows) == len(picks) >= 15
    first = rows[0].text()
    assert "Full GPU offload" in first and "tok/s" in first
    assert "catalogue models run on this machine" in page.recommended.status.text()


def test_model_view_lists_variants_with_the_pick_highlighted(page, qtbot):
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    pick = next(p for p in page.picks if p.model.name.startswith("Llama 3.1 8B"))
    page.open_pick(pick)
    table = page.model_view.table
    assert page.stack.currentIndex() == 1 and len(table) == len(pick.model.variants)
    row = table.recommended_row()
    assert row is not None and table.row_text(row)[0].startswith("★ ")
    assert table.row_text(row)[3] == "Runs on the CPU"
    exl2 = [i for i, a in enumerate(table.assessments) if a.variant.format == "exl2"]
    assert all(table.row_text(i)[3] == "Can't run here" for i in exl2)  # why: in the tooltip, the panel
    assert all("ExLlama engine on an NVIDIA GPU" in table.item(i, 3).toolTip() for i in exl2)
    fit = page.model_view.fit_view
    assert fit is not None and fit.plan.verdict == "cpu"
    assert page.model_view.cannot_run.isHidden()
    assert table.download_button(row).property("role") == "primary"
    with qtbot.waitSignal(page.download_requested) as got:
        table.download_button(row).click()
    assert got.args[0] is table.assessments[row]
    assert exl2  # the 8B lists EXL2 variants: on a CPU-only machine each says why it cannot run here
    page.model_view._show_fit(table.assessments[exl2[0]])
    assert page.model_view.fit_view is None and not page.model_view.cannot_run.isHidden()
    assert "needs the ExLlama engine on an NVIDIA GPU" in page.model_view.cannot_run.text()


def test_nothing_fits_is_explained(page, qtbot):
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        # The catalogue is ranked on the machine at rest (all its RAM): 1 GiB holds none of it.
        page.set_profile(profile(ram_total=1 * GiB, ram_free=1 * GiB))
    assert all(r.badge.text() == "Will not fit" for r in page.recommended.rows)
    assert "nothing fits" in page.recommended.rows[0].detail.text()


def test_the_results_list_replaces_the_hint_once_a_search_starts(page, qtbot):
    page.show()
    qtbot.waitExposed(page)
    search = page.search
    assert search.hint.isVisible() and not search.view.isVisible()
    with qtbot.waitSignal(search.search_failed, timeout=10_000):  # nothing listens on port 9
        search.query.setText("qwen")
        search.search()
        assert not search.hint.isVisible() and search.view.isVisible()  # while it searches
    # A failed search leaves no empty results box (issue 33): only what happened, in words.
    assert not search.hint.isVisible() and not search.view.isVisible() and search.status.isVisible()


@pytest.mark.parametrize(
    "key, modifier",
    [(Qt.Key.Key_Escape, Qt.KeyboardModifier.NoModifier), (Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)],
    ids=["Esc", "Alt+Left"],
)
def test_esc_and_alt_left_go_back_from_the_details_to_the_results(page, qtbot, key, modifier):
    page.show()
    qtbot.waitExposed(page)
    page.activateWindow()
    qtbot.waitUntil(page.isActiveWindow)
    with qtbot.waitSignal(page.picks_ready, timeout=10_000):
        page.set_profile(profile(ram_total=16 * GiB, ram_free=12 * GiB))
    page.open_pick(page.picks[0])
    assert page.stack.currentIndex() == 1
    focused = page.focusWidget()
    assert focused is not None and page.model_view.isAncestorOf(focused)
    qtbot.keyClick(focused, key, modifier)
    assert page.stack.currentIndex() == 0
