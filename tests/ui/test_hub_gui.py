"""Discover against the fake Hub: search, a repo's page (card, variants with fit badges), download into My Models."""

from __future__ import annotations

import pytest

from app.core.downloads.items import State
from app.core.library.from_downloads import LibraryFeed
from app.core.settings import SettingsStore
from app.ui.discover.discover_page import DiscoverPage
from app.ui.discover.model_page import render_markdown
from app.ui.downloads_panel import DownloadsPanel
from app.ui.library_page import LibraryPage
from app.ui.settings_dialog import SettingsDialog
from tests.fakehub import Fault, gguf_repo, mlx_repo
from tests.ui.hub_gui_fixtures import env, machine, pool_tasks, sha  # noqa: F401

REPO = "org/Tiny-GGUF"


@pytest.fixture
def discover(qtbot, env, machine):  # noqa: F811
    page = DiscoverPage(env.tasks, ranker=lambda m: [], hub=env.hub)
    page.machine = machine
    qtbot.addWidget(page)
    return page


def add_tiny(fake_hub, quant_files, repo_id=REPO, **meta):
    return fake_hub.add_repo(
        gguf_repo(repo_id, quants=("F16", "Q8_0"), split=None, make_gguf=lambda q: quant_files[q].read_bytes(), **meta)
    )


def test_search_lists_results_in_a_virtual_model_with_paging(qtbot, fake_hub, discover):
    for i in range(7):
        fake_hub.add_repo(gguf_repo(f"org{i % 2}/Llama-{i}-GGUF", downloads=100 * i, likes=i))
    fake_hub.add_repo(mlx_repo("mlx-community/Llama-mlx"))
    fake_hub.models_page_size = 5
    search = discover.search
    search.query.setText("llama")
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.search()
    assert got.args[0] == 5 and search.model.rowCount() == 5
    first = search.model.data(search.model.index(0))
    assert first.startswith("org0/Llama-6-GGUF\nby org0 · ↓ 600 · ♥ 6 · updated ")
    assert not search.more.isHidden()
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.more.click()
    assert got.args[0] == 7 and search.more.isHidden()  # the MLX repo is filtered out by format
    search.format.setCurrentIndex(search.format.findData("mlx"))
    with qtbot.waitSignal(search.results_ready, timeout=10_000) as got:
        search.search()
    assert got.args[0] == 1 and search.model.results[0].id == "mlx-community/Llama-mlx"


def test_search_offline_says_so(qtbot, discover, fake_hub):
    fake_hub.close()
    with qtbot.waitSignal(discover.search.search_failed, timeout=20_000) as got:
        discover.search.search()
    assert "can't reach the Hub" in got.args[0]
    # Said once, by the page's banner; under the search box, what it means there, and no empty results box.
    assert discover.offline_banner.isVisibleTo(discover) and "You're offline" in discover.offline_banner.message.text()
    assert discover.search.status.text() == "Search needs a connection to Hugging Face."
    assert discover.search.view.isHidden()


def test_search_open_download_progress_done_in_my_models(qtbot, fake_hub, env, discover, quant_files):  # noqa: F811
    add_tiny(fake_hub, quant_files)
    fake_hub.add_repo(gguf_repo("org/Unrelated-GGUF"))
    manager = env.manager()
    services = LibraryFeed(manager, env.library)
    panel = DownloadsPanel(manager, env.tasks, hub=env.hub)
    library_page = LibraryPage(env.library, env.tasks)
    for w in (panel, library_page):
        qtbot.addWidget(w)
    discover.download_requested.connect(panel.request_download)
    try:
        discover.search.query.setText("tiny")
        with qtbot.waitSignal(discover.search.results_ready, timeout=10_000) as got:
            discover.search.search()
        assert got.args[0] == 1
        with qtbot.waitSignal(discover.repo_ready, timeout=30_000):
            discover.search.open_row(0)
        assert discover.stack.currentIndex() == 1
        table = discover.model_view.table
        by_label = {a.variant.label: i for i, a in enumerate(table.assessments)}
        assert set(by_label) == {"F16", "Q8_0"}
        for a in table.assessments:  # the fit came from the real headers, read by Range
            assert a.spec is not None and a.spec.n_ctx_train == 4096 and a.plan.verdict == "cpu"
        row = by_label["Q8_0"]
        assert table.recommended_row() == row and table.row_text(row)[3] == "Runs on the CPU"
        assert all(r.range for r in fake_hub.requests("GET", "/resolve/") if r.path.endswith(".gguf"))

        size = quant_files["Q8_0"].stat().st_size
        fake_hub.faults.add("Tiny-Q8_0.gguf", Fault.throttle(size))  # about a second: progress is visible
        with qtbot.waitSignal(panel.download_queued, timeout=10_000) as got:
            table.download_button(row).click()
        item_id = got.args[0]
        dl_row = panel.row(item_id)
        qtbot.waitUntil(lambda: dl_row.rate.text().endswith("/s"), timeout=10_000)
        assert 0 < dl_row.bar.value() < 1000 and "of" in dl_row.bytes.text()
        qtbot.waitUntil(lambda: dl_row.item_state == State.DONE, timeout=20_000)
        assert dl_row.bar.value() == 1000 and dl_row.state.text().startswith("Done")

        qtbot.waitUntil(lambda: any(m.repo_id == REPO for m in library_page.models), timeout=10_000)
        model = next(m for m in library_page.models if m.repo_id == REPO)
        assert (model.format, model.quant, model.size) == ("gguf", "Q8_0", size)
        assert sha(model.path) == sha(quant_files["Q8_0"]) and model.path.is_relative_to(env.models)
        text = library_page.row_text(library_page.models.index(model))
        assert text[:3] == ["Tiny-GGUF:Q8_0", "GGUF", "Q8_0"] and text[6] == "Ready"
    finally:
        services.close()
        manager.close()


def test_model_card_renders_markdown_without_loading_remote_images(qtbot, fake_hub, discover, quant_files):
    image = f"{fake_hub.url}/img/tracker.png"
    card = (
        f"---\nlicense: mit\n---\n# Hello card\n\nSome **bold** words and a [link](https://example.org).\n\n"
        f"![tracker]({image})\n\n<script>alert(1)</script>\n"
    )
    add_tiny(fake_hub, quant_files, card=card, card_data={"license": "mit"})
    discover.show()
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000):
        discover.open_repo(REPO)
    browser = discover.model_view.card
    qtbot.waitUntil(lambda: browser.isVisible(), timeout=5_000)
    qtbot.wait(100)  # let the document lay out (that is when images are asked for)
    text = browser.toPlainText()
    assert "Hello card" in text and "bold" in text and "license: mit" not in text
    assert "<script>" in text  # shown as text, never as markup
    assert image in browser.blocked
    assert not fake_hub.requests(path_contains="/img/")
    assert not browser.openExternalLinks()
    assert "licence mit" in discover.model_view.subtitle.text()


def test_render_markdown_escapes_html_and_drops_front_matter():
    html = render_markdown(
        "---\ntags: [x]\n---\n# T\n\n<img src=x onerror=alert(1)>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    assert "<h1>T</h1>" in html and "<table>" in html and "tags:" not in html
    assert "<img src=x" not in html and "&lt;img" in html


def test_gated_repo_shows_the_licence_message(qtbot, fake_hub, discover, quant_files):
    add_tiny(fake_hub, quant_files, repo_id="org/Gated-GGUF", gated="manual")
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000) as got:
        discover.open_repo("org/Gated-GGUF")
    notice = discover.model_view.notice
    m = got.args[0]
    assert m.access_needed and m.page_url == f"{fake_hub.url}/org/Gated-GGUF"
    assert not notice.isHidden() and "is gated: accept its licence" in notice.text()
    assert f'href="{m.page_url}"' in notice.text() and notice.openExternalLinks()  # a link to the page
    assert "token in Settings" in notice.text()
    table = discover.model_view.table
    assert {a.variant.label for a in table.assessments} == {"F16", "Q8_0"}
    buttons = [table.download_button(i) for i in range(len(table.assessments))]
    assert buttons and not any(b.isEnabled() for b in buttons)  # nothing to download without access
    assert "gated" in buttons[0].toolTip()
    # Another repo, with access: the downloads are back.
    add_tiny(fake_hub, quant_files, repo_id="org/Open-GGUF")
    with qtbot.waitSignal(discover.repo_ready, timeout=30_000) as again:
        discover.open_repo("org/Open-GGUF")
    assert not again.args[0].access_needed
    assert all(table.download_button(i).isEnabled() for i in range(len(table.assessments)))


def test_missing_repo_is_explained(qtbot, fake_hub, discover):
    with qtbot.waitSignal(discover.repo_failed, timeout=20_000) as got:
        discover.open_repo("org/Nope")
    assert "no such model" in got.args[0] and discover.model_view.notice.text() == got.args[0]


def test_settings_hub_section_saves_token_endpoint_and_parallel_downloads(qtbot):
    from app.core.paths import app_paths

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths)
    qtbot.addWidget(dialog)
    assert dialog.hf_token.echoMode() == dialog.hf_token.EchoMode.Password
    dialog.hf_token.setText("hf_secret")
    dialog.hf_endpoint.setText("https://hf-mirror.example/")
    dialog.parallel_downloads.setValue(4)
    dialog.accept()
    saved = store.load()
    assert (saved.hf_token, saved.hf_endpoint, saved.parallel_downloads) == (
        "hf_secret",
        "https://hf-mirror.example",
        4,
    )

    again = SettingsDialog(store, saved, paths)
    qtbot.addWidget(again)
    assert again.hf_token.text() == "hf_secret" and again.parallel_downloads.value() == 4
    again.hf_endpoint.setText("ftp://nope")
    again.accept()
    assert again.result() == 0 and "http:// or https://" in again.error.text()
    assert store.load().hf_endpoint == "https://hf-mirror.example"


def test_settings_show_what_is_in_effect_and_the_real_models_folder(qtbot):
    from app.core.paths import app_paths

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    environ = {"HF_ENDPOINT": "https://mirror.from-env.example", "HF_TOKEN": "hf_env"}
    dialog = SettingsDialog(store, store.load(), paths, env=environ)
    qtbot.addWidget(dialog)
    assert dialog.endpoint_note.text() == (
        "In effect: https://mirror.from-env.example (from the HF_ENDPOINT environment variable)"
    )
    assert "HF_TOKEN environment variable" in dialog.token_note.text()
    dialog.hf_endpoint.setText("https://typed.example/")
    assert dialog.endpoint_note.text() == "In effect: https://typed.example (this setting)"
    bare = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(bare)
    assert "public Hub" in bare.endpoint_note.text() and "public models only" in bare.token_note.text()
    # The folder is a real path, default or not; saving the default keeps it following the data folder.
    assert bare.models_dir.text() == str(paths.models)
    bare.accept()
    assert store.load().models_dir == ""
    other = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(other)
    other.models_dir.setText("/srv/models")
    other.accept()
    assert store.load().models_dir == "/srv/models"
