"""Issue 13, Discover fixes: filters re-run the search, one click opens a result, the model page follows
the starred pick and the context slider, catalogue pages ask the Hub, the layout keeps the variants in view."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.discover.discover_page import DiscoverPage
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
