"""Qt tests collect garbage on the main thread only, as the app does (see app/ui/main_thread_gc.py)."""

import gc

import pytest


@pytest.fixture(autouse=True)
def main_thread_gc(qapp):
    gc.disable()
    yield
    gc.collect()  # here, on the main thread, while Qt is alive
    gc.enable()


@pytest.fixture
def themed(qapp):
    """The light theme on the application, as the app always has one (colours come from it), restored after."""
    from app.ui.theme import ThemeManager

    sheet, palette, colours = qapp.styleSheet(), qapp.palette(), qapp.property("hearthColours")
    themes = ThemeManager(qapp, "light")
    themes.apply()
    yield themes
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setProperty("hearthColours", colours)
    themes.deleteLater()
