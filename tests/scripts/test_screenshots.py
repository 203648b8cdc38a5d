"""`make screenshots` in CI: every page renders, in both themes, offscreen (one size here, to stay quick;
the make target renders both)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_renders_in_both_themes(qtbot, tmp_path, hearth_home):
    import os

    shots = load_script()
    written = shots.render(tmp_path, sizes=((900, 600),))
    names = {p.name for p in written}
    pages = (*shots.PAGES, *shots.FIRST_START_PAGES)
    assert names == {f"{page}-{theme}-900x600.png" for page in pages for theme in shots.THEMES}
    for path in written:
        image = QImage(str(path))
        assert not image.isNull() and image.width() >= 600
        assert len({image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 37)}) > 3
    light = QImage(str(tmp_path / "models-light-900x600.png")).pixelColor(450, 580).lightness()
    dark = QImage(str(tmp_path / "models-dark-900x600.png")).pixelColor(450, 580).lightness()
    assert light > dark + 80  # the dark theme is dark
    assert os.environ["HEARTH_HOME"] == str(hearth_home)  # the script put the test's home back
