"""The main window: a sidebar of pages; the pages themselves are built by the composition root."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, QRect, QSize, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.paths import AppPaths
from app.core.settings import Settings, SettingsStore, WindowState

if TYPE_CHECKING:
    from app.ui.settings_dialog import SettingsDialog

logger = logging.getLogger(__name__)

# The smallest window a saved size is restored to: every page is laid out for 900×600 and still works a
# little below it; smaller than this came from a broken save, not from the user.
MIN_RESTORED = QSize(760, 520)
GEOMETRY_PREFIX = "rect:"  # "rect:x,y,width,height[,max]": the window's own geometry, not Qt's blob


def geometry_text(rect: QRect, maximized: bool = False) -> str:
    """What Settings keeps of the window: its normal geometry (the inside, without the frame) and whether
    it was maximized."""
    parts = [rect.x(), rect.y(), rect.width(), rect.height()]
    return GEOMETRY_PREFIX + ",".join(map(str, parts)) + (",max" if maximized else "")


def parse_geometry(text: str) -> tuple[QRect, bool] | None:
    """`geometry_text` read back; None for anything else (empty, Qt's blob from an earlier version, damage)."""
    if not text.startswith(GEOMETRY_PREFIX):
        return None
    fields = text[len(GEOMETRY_PREFIX) :].split(",")
    try:
        x, y, width, height = (int(f) for f in fields[:4])
    except ValueError:
        return None
    if width <= 0 or height <= 0:
        return None
    return QRect(x, y, width, height), fields[4:] == ["max"]


def fit_to_screen(rect: QRect, available: QRect | None) -> QRect:
    """`rect` as saved, made to fit `available` (the screen less its panels): never larger than it, never
    smaller than MIN_RESTORED (unless the screen is), and moved back onto it if it would be off it."""
    width, height = max(rect.width(), MIN_RESTORED.width()), max(rect.height(), MIN_RESTORED.height())
    if available is None or available.isEmpty():
        return QRect(rect.topLeft(), QSize(width, height))
    width, height = min(width, available.width()), min(height, available.height())
    x = min(max(rect.x(), available.left()), available.right() + 1 - width)
    y = min(max(rect.y(), available.top()), available.bottom() + 1 - height)
    return QRect(x, y, width, height)


class MainWindow(QMainWindow):
    def __init__(
        self,
        store: SettingsStore,
        settings: Settings,
        paths: AppPaths,
        pages: list[tuple[str, str, QWidget | None]],  # (key, sidebar label, page; None: placed later)
    ) -> None:
        super().__init__()
        self.setWindowTitle("Hearth")
        self._store = store
        self.settings = settings
        self._paths = paths
        self._keys = [key for key, _, _ in pages]
        # Asked when the user closes the window; True hides it instead (main.py: keep serving from the tray).
        self.close_to_tray: Callable[[], bool] = lambda: False

        self.sidebar = QListWidget()
        self.sidebar.setObjectName("sidebar")
        self.sidebar.setFixedWidth(196)
        # Room for "Downloads (12)"; a longer label elides: a scroll bar under six entries only looked broken.
        self.sidebar.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sidebar.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.stack = QStackedWidget()
        for key, label, page in pages:
            item = QListWidgetItem(label)
            item.setData(Qt.ItemDataRole.UserRole, key)
            self.sidebar.addItem(item)
            self.stack.addWidget(page if page is not None else QWidget())
        self.sidebar.currentRowChanged.connect(self.stack.setCurrentIndex)
        # Settings at the foot of the sidebar, where a newcomer looks for it (File → Settings… and Ctrl+, too).
        self.settings_button = QPushButton("Settings")
        self.settings_button.setObjectName("sidebarSettings")
        self.settings_button.setToolTip("Settings (Ctrl+,)")
        self.settings_button.setIconSize(QSize(20, 20))  # as the pages' icons above it
        self.settings_button.clicked.connect(self.open_settings)
        side = QWidget()
        side.setObjectName("sidebarPanel")
        side.setAttribute(Qt.WidgetAttribute.WA_StyledBackground)  # a plain QWidget paints no style sheet background
        side.setFixedWidth(self.sidebar.width())
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 8)
        side_layout.setSpacing(0)
        side_layout.addWidget(self.sidebar, 1)
        side_layout.addWidget(self.settings_button)

        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(side)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self._build_menu()
        self._page_shortcuts()
        self.statusBar().showMessage("Ready")
        self._restore()

    def _build_menu(self) -> None:
        menu = self.menuBar().addMenu("&File")
        settings = QAction("&Settings…", self)
        # The platform's Preferences key where it has one (macOS: Cmd+,); Ctrl+, everywhere, as in most apps.
        settings.setShortcuts([*QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences), QKeySequence("Ctrl+,")])
        settings.triggered.connect(self.open_settings)
        menu.addAction(settings)
        if "models" in self._keys:
            # Filled when opened: My Models may be built after the window shows.
            self.import_menu = menu.addMenu("&Import")
            self.import_menu.aboutToShow.connect(self._fill_import_menu)
            self._fill_import_menu()
        menu.addSeparator()
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        menu.addAction(quit_action)

    def _fill_import_menu(self) -> None:
        """My Models' ways to import (its Import… button's), each showing My Models first, where the result
        is said."""
        self.import_menu.clear()
        actions = getattr(self.page("models"), "import_actions", None)
        if actions is None:
            self.import_menu.addAction("My Models is still opening…").setEnabled(False)
            return
        for entry in actions():
            if entry is None:
                self.import_menu.addSeparator()
                continue
            label, run = entry
            self.import_menu.addAction(label, functools.partial(self._import_with, run))

    def _import_with(self, run: Callable[[], None], *_checked: object) -> None:
        self.show_page("models")
        run()

    def _page_shortcuts(self) -> None:
        # Ctrl+1…Ctrl+9 follow the sidebar's order, so the numbers match what the user sees top to bottom.
        # Window-wide: the shortcut must work whichever page (or text box) holds the focus.
        for number, key in enumerate(self._keys[:9], start=1):
            shortcut = QShortcut(QKeySequence(f"Ctrl+{number}"), self)
            shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(lambda key=key: self.show_page(key))

    def page(self, key: str) -> Any:
        """The page widget registered under `key` (each page's own type; the caller knows which)."""
        return self.stack.widget(self._keys.index(key))

    def set_page(self, key: str, page: QWidget) -> None:
        """Main thread: put `page` in the place made for `key` (the window can show before its pages are
        built); the sidebar keeps its selection."""
        index = self._keys.index(key)
        old = self.stack.widget(index)
        self.stack.insertWidget(index, page)
        if old is not None:
            self.stack.removeWidget(old)
            old.deleteLater()
        self.stack.setCurrentIndex(self.sidebar.currentRow())

    def apply_icons(self, colour: str, selected: str) -> None:
        """Main thread: each sidebar entry's icon, in the theme's text colour (and on the accent when
        selected); called again when the theme changes."""
        from app.ui.icons import icon

        for row, key in enumerate(self._keys):
            self.sidebar.item(row).setIcon(icon(key, colour, selected))
        self.settings_button.setIcon(icon("settings", colour, selected))

    def set_page_label(self, key: str, label: str) -> None:
        """Main thread: change a page's sidebar text (e.g. a count); its key and place stay the same."""
        item = self.sidebar.item(self._keys.index(key))
        if item.text() != label:
            item.setText(label)

    def show_page(self, key: str) -> None:
        self.sidebar.setCurrentRow(self._keys.index(key))

    @property
    def current_page_key(self) -> str:
        return self._keys[self.stack.currentIndex()]

    def open_settings(self) -> SettingsDialog:
        # Imported here: its forms pull in most of the app, and the window must show before they load.
        from app.ui.settings_dialog import SettingsDialog

        to_server = self.show_server_settings if "server" in self._keys else None
        # The Documents page's latest read of the library's embedding models (None while it is not built).
        documents = getattr(self.page("documents"), "model_choices", None) if "documents" in self._keys else None
        dialog = SettingsDialog(
            self._store, self.settings, self._paths, self, show_server_settings=to_server, documents=documents
        )
        dialog.accepted.connect(lambda: self._settings_saved(dialog.settings))
        dialog.open()
        return dialog

    def show_server_settings(self) -> None:
        """The Server page, its Parallel requests field in view and focused (the one place it is edited)."""
        self.show_page("server")
        focus = getattr(self.page("server"), "focus_parallel_requests", None)  # a stand-in page may lack it
        if callable(focus):
            focus()

    def _settings_saved(self, settings: Settings) -> None:
        # Keep our window state: the dialog edited everything else.
        self.settings = settings.model_copy(update={"window": self.settings.window})
        self.statusBar().showMessage("Settings saved", 3000)

    def _restore(self) -> None:
        w = self.settings.window
        saved = parse_geometry(w.geometry)
        if saved is not None:
            rect, maximized = saved
            self._place(rect)
            if maximized:
                self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)
        elif w.geometry and self.restoreGeometry(QByteArray.fromBase64(w.geometry.encode("ascii"))):
            # Qt's own blob, saved by an earlier version: what it restored, held to the same bounds (a window
            # it had shrunk to 874×374 comes back usable).
            self._place(self.normalGeometry())
        else:
            self.resize(1100, 720)
        default = WindowState().page
        self.show_page(w.page if w.page in self._keys else default if default in self._keys else self._keys[0])

    def _place(self, rect: QRect) -> None:
        """The saved size and place, as they were where the screen allows: Qt's restoreGeometry shrank a
        900×600 window to 874×374 (it makes room for a frame it guesses, on a screen it may not know yet)."""
        screen = QGuiApplication.screenAt(rect.center()) or QGuiApplication.primaryScreen()
        available = screen.availableGeometry() if screen is not None else None
        self.setGeometry(fit_to_screen(rect, available))  # the inside of the window, as saved

    def save_state(self) -> None:
        geometry = geometry_text(self.normalGeometry() if self.isMaximized() else self.geometry(), self.isMaximized())
        window = self.settings.window.model_copy(update={"geometry": geometry, "page": self.current_page_key})
        self.settings = self.settings.model_copy(update={"window": window})
        try:
            self._store.save(self.settings)
        except OSError:
            logger.exception("could not save window state")

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        self.save_state()
        # Only the user closing the window (a spontaneous event from the window system) may go to the
        # tray; Quit, app.quit() and the quit signals close it with a plain close() and really quit.
        if event.spontaneous() and self.close_to_tray():
            event.ignore()
            self.hide()
            return
        super().closeEvent(event)
