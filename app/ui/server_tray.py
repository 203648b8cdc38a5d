"""Keep serving with the window closed: a tray icon whose menu shows the URL, opens Hearth, or quits.

The window asks `take_window()` when the user closes it; the tray takes it only when a tray exists, the
server is running and Settings → Server says so (see `keep_serving_in_tray`). Quit goes through
`QApplication.quit`, so Hearth shuts down the way it always does.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import QApplication, QMenu, QStyle, QSystemTrayIcon, QWidget

from app.ui.bridge import EventBridge
from app.ui.server_api import ApiControl, ServerStatusLike
from app.ui.server_model import keep_serving_in_tray

logger = logging.getLogger(__name__)


class ServerTray(QObject):
    def __init__(
        self,
        api: ApiControl,
        window: QWidget,
        keep_serving: Callable[[], bool],
        *,
        available: Callable[[], bool] = QSystemTrayIcon.isSystemTrayAvailable,
        quit_app: Callable[[], None] = QApplication.quit,
        icon: QIcon | None = None,
        parent: QObject | None = None,
    ) -> None:
        """`keep_serving()`: the current keep_serving_in_tray setting; `available()`: whether this
        desktop has a tray (asked at each close: a tray can come and go with the panel)."""
        super().__init__(parent or window)
        self.api, self.window = api, window
        self._keep, self._available, self._quit = keep_serving, available, quit_app
        self._told = False  # the "still serving" balloon is shown once, not at every close
        self.icon = QSystemTrayIcon(icon or window.style().standardIcon(QStyle.StandardPixmap.SP_DriveNetIcon), self)
        self.icon.setToolTip("Hearth")
        self.menu = QMenu(window)
        self.url_action = QAction("", self.menu)
        self.url_action.setEnabled(False)  # information, not a command
        self.open_action = QAction("Open Hearth", self.menu)
        self.open_action.triggered.connect(self.open_window)
        self.quit_action = QAction("Quit", self.menu)
        self.quit_action.triggered.connect(self.quit)
        self.menu.addAction(self.url_action)
        self.menu.addSeparator()
        self.menu.addAction(self.open_action)
        self.menu.addAction(self.quit_action)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self._bridge = EventBridge(api.changed, self)
        self._bridge.fired.connect(self._show_status)
        self._show_status(api.status)

    def take_window(self) -> bool:
        """Main thread, from the window's closeEvent: True when the window should hide to the tray."""
        if not keep_serving_in_tray(self._available(), self.api.status.running, self._keep()):
            return False
        self.icon.show()
        if not self._told:
            self._told = True
            self.icon.showMessage("Hearth is still serving", f"The API stays up at {self.api.status.url}.")
        logger.info("window closed; serving from the tray")
        return True

    def open_window(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
        self.icon.hide()

    def quit(self) -> None:
        self.icon.hide()
        self._quit()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        # On macOS a click opens the menu; elsewhere a click on a tray icon is expected to open the app.
        opens = {QSystemTrayIcon.ActivationReason.DoubleClick}
        if sys.platform != "darwin":
            opens.add(QSystemTrayIcon.ActivationReason.Trigger)
        if reason in opens:
            self.open_window()

    def _show_status(self, status: ServerStatusLike) -> None:
        """Main thread."""
        text = f"Serving at {status.url}" if status.running else "The API server is stopped"
        self.url_action.setText(text)
        self.icon.setToolTip(f"Hearth — {text}")
