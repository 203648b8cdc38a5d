"""Import where a newcomer looks for it: My Models' Import… menu and the main window's File → Import offer the
same ways, "From Ollama" among them, and what an import from another app finds is said with the folders it
looked in (never a bare "Imported 0 models.")."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QWidget

from app.core.library import Library
from app.ui.library_page import LibraryPage
from app.ui.main_window import MainWindow
from tests.core.library.test_ollama_import import MODEL, FakeOllama
from tests.ui.hub_gui_fixtures import pool_tasks  # noqa: F401

WAYS = ["GGUF file…", "Folder…", "", "From the Hugging Face cache", "From LM Studio", "From Ollama"]


@pytest.fixture
def page(qtbot, tmp_path, pool_tasks, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "models").mkdir()
    library = Library(tmp_path / "models", tmp_path / "library.db")
    page = LibraryPage(library, pool_tasks, confirm=lambda title, text: True, open_url=lambda url: True)
    qtbot.addWidget(page)
    qtbot.waitUntil(lambda: page.total.text() != "", timeout=5_000)
    yield page
    library.close()


@pytest.fixture
def fake_ollama(tmp_path, tiny_gguf_f16, monkeypatch) -> FakeOllama:
    fake = FakeOllama(tmp_path / "ollama-models")
    fake.manifest("tiny:latest", [(MODEL, fake.blob(tiny_gguf_f16.read_bytes()))])
    monkeypatch.setenv("OLLAMA_MODELS", str(fake.root))
    return fake


def texts(menu) -> list[str]:
    return [a.text() for a in menu.actions()]


def test_from_ollama_imports_in_place_and_says_where_it_looked(qtbot, page, fake_ollama):
    menu = page.import_button.menu()
    assert texts(menu) == WAYS
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        next(a for a in menu.actions() if a.text() == "From Ollama").trigger()
    assert got.args[0] == f"Imported 1 model. Looked in {fake_ollama.root}."
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5_000)
    assert page.row_text(0)[0] == "tiny:latest"


def test_from_lm_studio_with_nothing_there_says_where_it_looked(qtbot, page, tmp_path):
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        page.import_lmstudio()
    said = got.args[0]
    assert said.startswith("Imported 0 models. Not there: ")
    assert str(tmp_path / "home" / ".lmstudio" / "models") in said


def test_file_import_in_the_main_window_lists_my_models_ways_and_runs_them_there(qtbot, page, fake_ollama):
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    window = MainWindow(
        store, store.load(), paths, [("discover", "Discover", QWidget()), ("models", "My Models", None)]
    )
    qtbot.addWidget(window)
    file_menu = window.menuBar().actions()[0].menu()
    assert "&Import" in texts(file_menu)
    window.import_menu.aboutToShow.emit()
    assert texts(window.import_menu) == ["My Models is still opening…"]  # the page is built after the window
    window.set_page("models", page)
    window.import_menu.aboutToShow.emit()
    assert texts(window.import_menu) == WAYS
    assert window.current_page_key == "discover"
    with qtbot.waitSignal(page.import_finished, timeout=10_000) as got:
        next(a for a in window.import_menu.actions() if a.text() == "From Ollama").trigger()
    assert window.current_page_key == "models" and got.args[0].startswith("Imported 1 model.")
