"""My Models: the library table, Reveal, Delete (confirmed), Import… in place, HF cache import."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtTest import QTest

from app.core.library import Library, ModelFile
from app.core.units import fmt_bytes
from app.ui.library_page import LibraryPage
from tests.ui.hub_gui_fixtures import pool_tasks  # noqa: F401


@pytest.fixture
def library(tmp_path):
    (tmp_path / "models").mkdir()
    lib = Library(tmp_path / "models", tmp_path / "library.db")
    yield lib
    lib.close()


@pytest.fixture
def make_page(qtbot, library, pool_tasks):  # noqa: F811
    def make(answer=True):
        asked, opened = [], []

        def confirm(title, text):
            asked.append(text)
            return answer

        page = LibraryPage(library, pool_tasks, confirm=confirm, open_url=lambda url: opened.append(url) or True)
        qtbot.addWidget(page)
        qtbot.waitUntil(lambda: page.total.text() != "", timeout=5_000)
        page.asked, page.opened = asked, opened
        return page

    return make


def downloaded(library, quant_files, name="Q8_0"):
    dest = library.models_dir / "org" / "Tiny-GGUF" / f"Tiny-{name}.gguf"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(quant_files[name], dest)
    return library.add_download(
        repo_id="org/Tiny-GGUF",
        commit="c0ffee",
        format="gguf",
        quant=name,
        files=[ModelFile(dest, dest.stat().st_size, None)],
    )


def test_table_shows_models_and_total(qtbot, make_page, library, quant_files):
    page = make_page()
    assert page.table.rowCount() == 0 and page.total.text() == "0 models · 0 B on disk"
    model = downloaded(library, quant_files)
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)  # library.changed → reload
    name, fmt, quant, size, path, used, status = page.row_text(0)
    assert (name, fmt, quant, size, status) == ("Tiny-GGUF:Q8_0", "GGUF", "Q8_0", fmt_bytes(model.size), "Ready")
    assert path == str(model.path) and used == "never"
    assert page.total.text() == f"1 model · {fmt_bytes(model.size)} on disk"


def test_import_in_place_then_reveal_and_delete_keeps_outside_files(qtbot, make_page, library, quant_files, tmp_path):
    page = make_page()
    outside = tmp_path / "elsewhere" / "mine.gguf"
    outside.parent.mkdir()
    shutil.copy(quant_files["F16"], outside)
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        page.import_path(outside)
    assert got.args[0] == "Imported 1 model."
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    assert page.row_text(0)[4] == str(outside) and page.row_text(0)[2] == "F16"
    # The model just imported is selected: Chat, Reveal and Delete work at once.
    qtbot.waitUntil(page.reveal_button.isEnabled, timeout=5_000)
    assert page.selected() is not None and page.selected().path == outside and page.chat_button.isEnabled()
    page.reveal_selected()
    assert page.opened == [QUrl.fromLocalFile(str(outside.parent))]
    page.delete_selected()
    assert "files stay where they are" in page.asked[0]
    qtbot.waitUntil(lambda: page.table.rowCount() == 0, timeout=5_000)
    assert outside.exists()  # imported in place: never deleted from its own folder


def test_delete_asks_and_frees_the_models_folder(qtbot, make_page, library, quant_files):
    model = downloaded(library, quant_files)
    page = make_page(answer=False)
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    page.select(model.id)
    page.delete_selected()
    assert page.asked and page.asked[0].startswith("Delete Tiny-GGUF:Q8_0 and its files")
    qtbot.wait(100)
    assert model.path.exists() and library.get(model.id) is not None  # "No" keeps it

    page._confirm = lambda title, text: True
    page.delete_selected()
    qtbot.waitUntil(lambda: page.table.rowCount() == 0, timeout=5_000)
    assert not model.path.exists() and page.status.text() == f"Deleted; freed {fmt_bytes(model.size)}."


def test_missing_file_shows_its_status(qtbot, make_page, library, quant_files):
    model = downloaded(library, quant_files)
    model.path.unlink()
    page = make_page()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    assert page.row_text(0)[6] == f"Missing: missing: {model.path.name}"


def test_bad_import_is_explained(qtbot, make_page, tmp_path):
    page = make_page()
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 40)
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        page.import_path(bad)
    assert got.args[0].startswith("Nothing imported: ") and "broken.gguf" in got.args[0]
    assert page.table.rowCount() == 0


def test_hf_cache_import_with_an_empty_cache(qtbot, make_page):
    page = make_page()
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        page.import_hf_cache()
    assert got.args[0].startswith("Imported 0 models")


def test_reveal_without_a_file_manager_says_where_the_model_is(qtbot, library, pool_tasks, quant_files, tmp_path):  # noqa: F811
    page = LibraryPage(library, pool_tasks, confirm=lambda *_: True, open_url=lambda url: False)
    qtbot.addWidget(page)
    outside = tmp_path / "elsewhere" / "mine.gguf"
    outside.parent.mkdir()
    shutil.copy(quant_files["F16"], outside)
    with qtbot.waitSignal(page.import_finished, timeout=10_000):
        page.import_path(outside)
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    page.table.selectRow(0)
    page.reveal_selected()
    assert "No file manager" in page.status.text() and str(outside.parent) in page.status.text()


def double_click_row(table, row):
    """As the window system delivers a double-click: a click, then the double-click event. (QTest's
    mouseDClick alone sends only the second half, which an item view ignores without the first press.)"""
    pos = table.visualItemRect(table.item(row, 0)).center()
    QTest.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    QTest.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton, pos=pos)


def test_chat_button_double_click_and_menu_ask_for_the_model(qtbot, make_page, library, quant_files):
    model = downloaded(library, quant_files)
    page = make_page()
    page.show()
    qtbot.waitExposed(page)
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    assert not page.chat_button.isEnabled()  # nothing selected yet
    with qtbot.waitSignal(page.chat_requested) as got:
        double_click_row(page.table, 0)
    assert got.args[0].id == model.id
    assert page.chat_button.isEnabled()  # the double-click selected the row
    with qtbot.waitSignal(page.chat_requested) as got:
        page.chat_button.click()
    assert got.args[0].id == model.id

    page.table.clearSelection()
    menu = page.context_menu(0)
    actions = {a.text(): a for a in menu.actions() if not a.isSeparator()}
    assert list(actions) == ["Chat", "Reveal", "Delete…"]
    with qtbot.waitSignal(page.chat_requested) as got:
        actions["Chat"].trigger()
    assert got.args[0].id == model.id
    actions["Reveal"].trigger()  # the same Reveal as the button
    assert page.opened == [QUrl.fromLocalFile(str(model.path.parent))]
    page._confirm = lambda title, text: False
    actions["Delete…"].trigger()
    assert page.selected() is not None and library.get(model.id) is not None  # asked, answered No


def test_a_missing_model_cannot_be_chatted_with(qtbot, make_page, library, quant_files):
    model = downloaded(library, quant_files)
    model.path.unlink()
    page = make_page()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    page.select(model.id)
    assert not page.chat_button.isEnabled()
    assert not page.context_menu(0).actions()[0].isEnabled()
    with qtbot.assertNotEmitted(page.chat_requested):
        page.chat_selected()
    assert "cannot be loaded" in page.status.text()


def test_a_long_path_elides_instead_of_scrolling_the_table_sideways(qtbot, make_page, library, quant_files):
    page = make_page()
    deep = library.models_dir / ("a-very-long-folder-name-" * 6) / "org" / "Tiny-GGUF"
    deep.mkdir(parents=True)
    dest = deep / "Tiny-Q8_0.gguf"
    shutil.copy(quant_files["Q8_0"], dest)
    library.add_download(
        repo_id="org/Tiny-GGUF",
        commit="c0ffee",
        format="gguf",
        quant="Q8_0",
        files=[ModelFile(dest, dest.stat().st_size, None)],
    )
    page.resize(700, 400)
    page.show()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    qtbot.wait(20)
    assert page.table.horizontalScrollBar().maximum() == 0  # every column in view
    assert page.table.item(0, 4).toolTip() == str(dest)  # the whole path, on hover


def test_an_empty_library_says_what_my_models_is_and_how_to_fill_it(
    qtbot, make_page, library, quant_files, monkeypatch
):
    page = make_page()
    page.show()
    qtbot.waitExposed(page)
    assert page.empty.isVisible() and not page.table.isVisible()  # a friendly card, not a blank table
    with qtbot.waitSignal(page.discover_requested, timeout=1_000):
        page.empty.find_button.click()
    # "Import a file…" asks for a GGUF and imports it in place, as Import… → GGUF file… does.
    import app.ui.library_page as library_page

    monkeypatch.setattr(library_page, "open_file_name", lambda *a, **k: str(quant_files["Q8_0"]))
    page.empty.import_button.click()
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    assert page.table.isVisible() and not page.empty.isVisible()


def test_find_a_model_opens_discover_in_the_window(qtbot):
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.main import build_shell

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    shell = build_shell(paths, store, store.load().model_copy(update={"measure_bandwidth_on_start": False}))
    qtbot.addWidget(shell.window)
    try:
        window = shell.window
        window.show_page("models")
        page = window.page("models")
        qtbot.waitUntil(lambda: page.total.text() != "", timeout=5_000)
        page.empty.find_button.click()
        assert window.current_page_key == "discover"
    finally:
        shell.shutdown()


def test_a_model_that_sees_images_says_so_beside_its_name(qtbot, make_page, library, tiny_gguf_f16, tmp_path):
    """Two files of one model, the plain one and its vision copy, differ by more than their names (issue 46)."""
    from app.core.library import import_path
    from tests.fixtures.tiny_projector import write_tiny_projector

    plain = tmp_path / "plain" / "tiny.gguf"
    seeing = tmp_path / "vision" / "tiny.gguf"
    for path in (plain, seeing):
        path.parent.mkdir()
        shutil.copy(tiny_gguf_f16, path)
    write_tiny_projector(seeing.parent / "mmproj-tiny-F16.gguf", n_embd_text=256)
    import_path(library, plain)
    import_path(library, seeing)
    page = make_page()
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=5_000)
    names = sorted(page.table.item(row, 0).text() for row in range(2))
    assert names == ["tiny", "tiny (vision) · Vision"]
