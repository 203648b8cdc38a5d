"""The design system: one palette in a light and a dark theme, the style sheet filled from it, the OS's
colour scheme followed unless the user chose one, and Settings → Appearance applying at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.ui.theme import ThemeManager, load_palettes, style_sheet


@pytest.fixture
def app(qtbot):
    """The application, with its look restored afterwards (other tests read colours off widgets)."""
    app = QApplication.instance()
    from app.ui.chat import render

    sheet, palette, colours = app.styleSheet(), app.palette(), app.property("hearthColours")
    yield app
    app.setProperty("hearthColours", colours)
    render.use_look(render.ChatLook())  # the chat's message colours are global too
    app.setPalette(palette)
    app.setStyleSheet(sheet)


def test_both_themes_have_every_colour_the_style_sheet_uses():
    palettes = load_palettes()
    assert set(palettes["light"].colours) == set(palettes["dark"].colours)
    for p in palettes.values():
        sheet = style_sheet(p)
        assert "$" not in sheet  # every $token was filled
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in p.colours.values())
    light, dark = palettes["light"], palettes["dark"]
    assert light["window"] != dark["window"] and light["text"] != dark["text"]


def light_free(sheet: str) -> bool:
    """No colour of the light theme left in a dark style sheet (nothing is written per theme by hand)."""
    light, dark = load_palettes()["light"].colours, load_palettes()["dark"].colours
    return not any(c in sheet for c in set(light.values()) - set(dark.values()))


def test_a_chosen_theme_is_applied_and_the_system_one_follows_the_os(app, qtbot, monkeypatch):
    import app.ui.theme as theme

    os_scheme = {"now": "light"}  # the offscreen platform has no colour scheme: the OS is played here
    monkeypatch.setattr(theme, "system_theme", lambda: os_scheme["now"])
    themes = ThemeManager(app, "dark")
    assert themes.apply() == "dark"
    dark = load_palettes()["dark"]
    assert app.palette().color(QPalette.ColorRole.Window).name() == dark["window"]
    assert dark["accent"] in app.styleSheet() and light_free(app.styleSheet())
    hints = QGuiApplication.styleHints()
    assert themes.apply("system") == "light"
    light = load_palettes()["light"]
    assert app.palette().color(QPalette.ColorRole.Window).name() == light["window"]
    os_scheme["now"] = "dark"  # the OS switches, and says so: a "system" theme follows
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert themes.theme == "dark" and app.palette().color(QPalette.ColorRole.Window).name() == dark["window"]
    themes.apply("light")  # a chosen theme does not follow
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert themes.theme == "light"


def test_settings_appearance_is_saved(qtbot):
    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.ui.settings_dialog import SettingsDialog

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    dialog = SettingsDialog(store, store.load(), paths, env={})
    qtbot.addWidget(dialog)
    assert dialog.theme.currentData() == "system"
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.accept()
    assert store.load().theme == "dark"


def test_the_main_actions_are_primary_buttons(qtbot):
    from app.ui.server_cards import KeyCard, StatusCard

    card = StatusCard()
    qtbot.addWidget(card)
    assert card.start_button.property("role") == "primary"
    key = KeyCard()
    qtbot.addWidget(key)
    assert key.regenerate_button.property("role") == "destructive"  # the old key stops working
    assert 'QPushButton[role="primary"]' in style_sheet(load_palettes()["light"])


def test_sidebar_icons_are_drawn_in_the_themes_colours(app, qtbot):
    from PySide6.QtGui import QIcon

    from app.core.paths import app_paths
    from app.core.settings import SettingsStore
    from app.main import build_shell

    paths = app_paths().ensure()
    store = SettingsStore(paths.settings_file)
    settings = store.load().model_copy(update={"measure_bandwidth_on_start": False, "theme": "dark"})
    themes = ThemeManager(app, "dark")
    themes.apply()
    shell = build_shell(paths, store, settings, themes=themes)
    qtbot.addWidget(shell.window)
    try:
        sidebar = shell.window.sidebar

        def ink(row: int, mode=QIcon.Mode.Normal) -> set[str]:
            image = sidebar.item(row).icon().pixmap(20, 20, mode).toImage()
            return {
                image.pixelColor(x, y).name()
                for x in range(image.width())
                for y in range(image.height())
                if image.pixelColor(x, y).alpha() == 255
            }

        dark = load_palettes()["dark"]
        assert all(not sidebar.item(r).icon().isNull() for r in range(sidebar.count()))
        assert dark["text"] in ink(0) and dark["accent_text"] in ink(0, QIcon.Mode.Selected)
        themes.apply("light")  # the icons follow the theme
        assert load_palettes()["light"]["text"] in ink(0)
    finally:
        shell.shutdown()
        themes.deleteLater()


def test_chat_messages_render_in_the_themes_colours(app, qtbot):
    from app.ui.chat import render

    dark = load_palettes()["dark"]
    render.use_look(render.ChatLook())
    before = render.look_generation()
    try:
        render.use_look(render.ChatLook.from_palette(dark.colours, dark=True))
        assert render.look_generation() == before + 1
        block = render.code_block_html("x = 1\n", "python", 0)
        assert dark["surface_alt"] in block and "#f6f8fa" not in block  # no light code box on a dark page
        shown = render.render_message("<think>hmm</think>Done.")
        assert dark["text_muted"] in shown.html
    finally:
        render.use_look(render.ChatLook())
    assert "#f6f8fa" in render.code_block_html("x = 1\n", "python", 0)


def test_status_colours_come_from_the_theme_and_follow_it(app, qtbot):
    from PySide6.QtWidgets import QLabel

    from app.ui.theme import set_status

    label = QLabel("the port is in use")
    qtbot.addWidget(label)
    label.show()
    themes = ThemeManager(app, "dark")
    themes.apply()
    set_status(label, "error")

    def ink() -> str:
        label.ensurePolished()
        return label.palette().color(QPalette.ColorRole.WindowText).name()

    assert ink() == load_palettes()["dark"]["error"]
    themes.apply("light")  # the same label, the next theme's colour, nothing re-set on it
    assert ink() == load_palettes()["light"]["error"]
    set_status(label, "warning")
    assert ink() == load_palettes()["light"]["warning"]
    themes.deleteLater()


def test_fit_badges_take_the_themes_verdict_colours_and_follow_it(app, qtbot):
    from PySide6.QtWidgets import QLabel

    from app.ui.theme import set_verdict, verdict_colours

    badge = QLabel("Runs on the CPU")
    qtbot.addWidget(badge)
    badge.show()
    themes = ThemeManager(app, "dark")
    themes.apply()
    set_verdict(badge, "cpu")

    def colours() -> tuple[str, str]:
        badge.ensurePolished()
        pal = badge.palette()
        return pal.color(QPalette.ColorRole.Window).name(), pal.color(QPalette.ColorRole.WindowText).name()

    dark, light = load_palettes()["dark"], load_palettes()["light"]
    assert colours() == (dark["fit_cpu"], dark["fit_cpu_text"])
    assert verdict_colours("cpu")[0].name() == dark["fit_cpu"]  # what a table cell is painted with
    themes.apply("light")
    assert colours() == (light["fit_cpu"], light["fit_cpu_text"])
    assert verdict_colours("no_fit")[0].name() == light["fit_no_fit"]
    themes.deleteLater()


def test_the_context_meter_and_the_chat_notice_are_coloured_by_level_from_the_theme(app, qtbot):
    from app.ui.chat.header import ContextMeter

    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.show()
    themes = ThemeManager(app, "light")
    themes.apply()
    light = load_palettes()["light"]

    def chunk() -> str:
        image = meter.bar.grab().toImage()
        return image.pixelColor(2, image.height() // 2).name()

    meter.show_usage(4096, 4096)  # full
    assert meter.bar.property("level") == "full" and meter.bar.styleSheet() == ""
    assert chunk() == light["error"]
    meter.show_usage(2048, 4096)
    assert meter.bar.property("level") == "ok" and chunk() == light["success"]
    # The empty part is the theme's track, not a white box that reads as a text field.
    image = meter.bar.grab().toImage()
    assert image.pixelColor(image.width() - 3, image.height() // 2).name() == light["meter_track"]
    themes.deleteLater()


def test_the_control_marks_exist_for_each_theme_in_its_colours():
    from app.core.resources import resource_path

    for name, p in load_palettes().items():
        sheet = style_sheet(p)
        for url in re.findall(r"url\(([^)]+)\)", sheet):
            assert url.endswith(f"-{name}.svg") and Path(url).is_file(), url
        controls = resource_path("styles", "controls")
        assert p["accent_text"] in (controls / f"check-{name}.svg").read_text()
        for arrow in ("arrow-up", "arrow-down"):
            assert p["text_muted"] in (controls / f"{arrow}-{name}.svg").read_text()


def test_a_check_box_is_visible_on_the_dark_theme_and_filled_when_checked(app, qtbot):
    from PySide6.QtWidgets import QCheckBox

    box = QCheckBox("Start the server when Hearth starts")
    qtbot.addWidget(box)
    box.show()
    themes = ThemeManager(app, "dark")
    themes.apply()
    dark = load_palettes()["dark"]

    def colours() -> set[str]:
        image = box.grab().toImage()
        return {image.pixelColor(x, y).name() for x in range(0, 20) for y in range(image.height())}

    assert dark["text_muted"] in colours()  # the empty box's outline shows on the dark window
    box.setChecked(True)
    assert dark["accent"] in colours()
    themes.deleteLater()


def test_a_disabled_destructive_button_does_not_look_like_an_action(app, qtbot):
    from PySide6.QtWidgets import QPushButton

    button = QPushButton("Delete…")
    button.setProperty("role", "destructive")
    qtbot.addWidget(button)
    button.show()
    themes = ThemeManager(app, "light")
    themes.apply()
    light = load_palettes()["light"]

    def text_colour() -> str:
        button.ensurePolished()
        return button.palette().color(QPalette.ColorRole.ButtonText).name()

    assert text_colour() == light["error"]
    button.setEnabled(False)
    button.style().unpolish(button)
    button.style().polish(button)
    assert text_colour() == light["text_disabled"]
    themes.deleteLater()


FOCUSABLE = ("QPushButton", "QToolButton", "QLineEdit", "QSpinBox", "QComboBox", "QTableView", "QListView")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_control_has_a_focus_ring_and_a_disabled_look_in_both_themes(theme):
    palette = load_palettes()[theme]
    sheet = style_sheet(palette)
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", sheet, flags=re.S))

    def declared(widget: str, state: str) -> str:
        """The declarations of the rules whose selector names `widget` (no property, no sub-control) in `state`."""
        return " ".join(
            body for selectors, body in rules for sel in selectors.split(",") if sel.strip() == f"{widget}:{state}"
        )

    for widget in FOCUSABLE:
        assert f"2px solid {palette['focus']}" in declared(widget, "focus"), widget
    for widget in ("QPushButton", "QToolButton", "QLineEdit", "QSpinBox", "QComboBox", "QCheckBox"):
        assert palette["text_disabled"] in declared(widget, "disabled"), widget
    # Hovering a button shades it; it never borrows the accent's border, which read as focus.
    assert "border" not in declared("QPushButton", "hover") + declared("QToolButton", "hover")
    assert palette["text_disabled"] not in (palette["text"], palette["text_muted"])


def _shown(qtbot, widget):
    """`widget` in a window of its own (the theme's window colour behind it), shown and active."""
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    holder = QWidget()
    holder.setAutoFillBackground(True)
    QVBoxLayout(holder).addWidget(widget)
    qtbot.addWidget(holder)
    holder.show()
    qtbot.waitExposed(holder)
    holder.activateWindow()
    return holder


def _colours(widget) -> set[str]:
    image = widget.grab().toImage()
    return {image.pixelColor(x, y).name() for x in range(image.width()) for y in range(image.height())}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_focused_button_and_field_draw_the_focus_ring(app, qtbot, theme):
    from PySide6.QtWidgets import QLineEdit, QPushButton

    themes = ThemeManager(app, theme)
    themes.apply()
    palette = load_palettes()[theme]
    holders = []  # kept: a holder dropped here would be deleted with its widget
    for widget in (QPushButton("Save"), QLineEdit("8487")):
        holders.append(_shown(qtbot, widget))
        widget.clearFocus()
        qtbot.waitUntil(lambda w=widget: not w.hasFocus())
        assert palette["focus"] not in _colours(widget), type(widget).__name__
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(widget.hasFocus)
        image = widget.grab().toImage()
        middle = image.height() // 2
        assert image.pixelColor(0, middle).name() == palette["focus"], type(widget).__name__
        assert image.pixelColor(1, middle).name() == palette["focus"]  # two pixels wide
    themes.deleteLater()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_disabled_button_is_drawn_muted_not_like_an_enabled_one(app, qtbot, theme):
    from PySide6.QtWidgets import QPushButton

    themes = ThemeManager(app, theme)
    themes.apply()
    palette = load_palettes()[theme]
    enabled, disabled = QPushButton("Stop"), QPushButton("Stop")
    disabled.setEnabled(False)
    holders = []
    for button in (enabled, disabled):
        button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        holders.append(_shown(qtbot, button))
    on, off = _colours(enabled), _colours(disabled)
    assert palette["text"] in on and palette["text"] not in off  # its label's ink
    assert palette["text_disabled"] in off
    # Its face is the window's, not the raised surface of a button that can be clicked.
    seen = holders[1].grab(disabled.geometry()).toImage()  # with what is behind it
    inside = seen.pixelColor(6, seen.height() // 2).name()
    assert inside == palette["window"] != palette["surface"]
    themes.deleteLater()
