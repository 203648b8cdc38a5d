"""Hearth's look, said once: a palette with a light and a dark theme (resources/styles/palette.json), the
style sheet that uses it (hearth.qss, with `$name` for each colour), and which theme is in effect: the
OS's colour scheme unless the user chose one (Settings → Appearance)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from string import Template
from typing import Literal

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QWidget

from app.core.resources import resource_path

logger = logging.getLogger(__name__)

Mode = Literal["system", "light", "dark"]
Status = Literal["error", "warning", "success", "muted", "muted-strong"]


def restyle_by(widget: QWidget, name: str, value: str | None) -> None:
    """Set the dynamic property the style sheet selects on (`status`, `verdict`, `level`) and have it read
    again: a dynamic property is only read when the widget is polished."""
    if widget.property(name) == value:
        return
    widget.setProperty(name, value)
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)


def set_status(widget: QWidget, status: Status | None) -> None:
    """Mark a label as an error, a warning, a success…: the style sheet colours it in the current theme
    (and in the next one), instead of a colour written on the widget."""
    restyle_by(widget, "status", status)


def set_verdict(widget: QWidget, verdict: str | None) -> None:
    """A fit badge in the theme's colour for its verdict (full_gpu, partial, cpu, no_fit)."""
    restyle_by(widget, "verdict", verdict)


VERDICTS = ("full_gpu", "partial", "cpu", "no_fit")
_COLOURS_PROPERTY = "hearthColours"  # the palette in effect, on the application, for what QSS cannot reach


@lru_cache(maxsize=1)
def _light() -> dict[str, str]:
    return load_palettes()["light"].colours


def theme_colour(token: str) -> QColor:
    """A palette colour of the theme in effect, for what a style sheet cannot colour: a table cell, a list's
    decoration. Before any theme is applied (tests, early start), the light palette's."""
    app = QApplication.instance()
    colours = app.property(_COLOURS_PROPERTY) if app is not None else None
    return QColor((colours or _light())[token])


def verdict_colours(verdict: str) -> tuple[QColor, QColor]:
    """(background, text) of a fit verdict in the theme in effect."""
    return theme_colour(f"fit_{verdict}"), theme_colour(f"fit_{verdict}_text")


Theme = Literal["light", "dark"]


@dataclass(frozen=True)
class Palette:
    name: Theme
    colours: dict[str, str]

    def __getitem__(self, token: str) -> str:
        return self.colours[token]


def load_palettes() -> dict[Theme, Palette]:
    data = json.loads(resource_path("styles", "palette.json").read_text(encoding="utf-8"))
    return {"light": Palette("light", data["light"]), "dark": Palette("dark", data["dark"])}


def style_sheet(palette: Palette) -> str:
    """hearth.qss with the palette's colours filled in; a token the palette lacks is an error, not a gap."""
    template = Template(resource_path("styles", "hearth.qss").read_text(encoding="utf-8"))
    # Besides the colours: where the theme's control marks are (check, arrows), and which theme's.
    controls = resource_path("styles", "controls").as_posix()
    return template.substitute(palette.colours, controls=controls, theme=palette.name)


def system_theme() -> Theme:
    hints = QGuiApplication.styleHints()
    return "dark" if hints.colorScheme() == Qt.ColorScheme.Dark else "light"


def theme_for(mode: Mode) -> Theme:
    return system_theme() if mode == "system" else mode


def qt_palette(p: Palette) -> QPalette:
    """The same colours for what the style sheet does not reach (menus, native dialogs, the table's text)."""
    pal = QPalette()
    roles = {
        QPalette.ColorRole.Window: p["window"],
        QPalette.ColorRole.WindowText: p["text"],
        QPalette.ColorRole.Base: p["surface"],
        QPalette.ColorRole.AlternateBase: p["surface_alt"],
        QPalette.ColorRole.Text: p["text"],
        QPalette.ColorRole.Button: p["surface"],
        QPalette.ColorRole.ButtonText: p["text"],
        QPalette.ColorRole.Highlight: p["selection"],
        QPalette.ColorRole.HighlightedText: p["text"],
        QPalette.ColorRole.ToolTipBase: p["surface"],
        QPalette.ColorRole.ToolTipText: p["text"],
        QPalette.ColorRole.PlaceholderText: p["text_muted"],
        QPalette.ColorRole.Link: p["info"],
        QPalette.ColorRole.Mid: p["border"],
        QPalette.ColorRole.Dark: p["text_muted"],
    }
    for role, colour in roles.items():
        pal.setColor(role, QColor(colour))
    # Disabled text is fainter than muted text: a disabled control must not read as a quiet enabled one.
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        pal.setColor(QPalette.ColorGroup.Disabled, role, QColor(p["text_disabled"]))
    return pal


class ThemeManager(QObject):
    """Main thread. `apply(mode)` puts a theme on the application; with "system" it follows the OS when
    its colour scheme changes. `changed(theme)` fires after each apply, for what the style sheet cannot
    colour (icons drawn from SVG)."""

    changed = Signal(str)

    def __init__(self, app: QApplication, mode: Mode = "system") -> None:
        super().__init__(app)
        self.app = app
        self.palettes = load_palettes()
        self.mode: Mode = mode
        self.theme: Theme = "light"
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._os_changed)

    def apply(self, mode: Mode | None = None) -> Theme:
        self.mode = mode or self.mode
        self.theme = theme_for(self.mode)
        palette = self.palettes[self.theme]
        self.app.setStyle("Fusion")  # the one style that draws every control from the palette on every OS
        self.app.setPalette(qt_palette(palette))
        self.app.setStyleSheet(style_sheet(palette))
        self.app.setProperty(_COLOURS_PROPERTY, dict(palette.colours))
        logger.debug("theme %s (setting %s)", self.theme, self.mode)
        self.changed.emit(self.theme)
        return self.theme

    @property
    def palette(self) -> Palette:
        return self.palettes[self.theme]

    def _os_changed(self, *_: object) -> None:
        if self.mode == "system":
            self.apply()
