"""One line that says Hugging Face cannot be reached, with a Retry: said once for the page, not by every
button and result box that needed the Hub."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QWidget

from app.core.hub.errors import HubOffline
from app.ui.theme import set_status
from app.ui.widgets.message_label import MessageLabel

OFFLINE_TEXT = "You're offline — Hugging Face can't be reached. Models already downloaded still work."
# The core's HubOffline message (app/core/hub/errors.py). A download request's failure reaches the UI as
# text only (DownloadsPanel.request_finished), so that is what tells an offline one from the others.
_OFFLINE_WORDS = "can't reach the hub"


def is_offline(error: BaseException | str) -> bool:
    """Whether a Hub failure means the Hub (or its mirror) could not be reached at all."""
    return isinstance(error, HubOffline) or _OFFLINE_WORDS in str(error).lower()


class OfflineBanner(QFrame):
    retry_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.message = MessageLabel(OFFLINE_TEXT)
        set_status(self.message, "warning")
        self.retry = QPushButton("Retry")
        self.retry.setToolTip("Try to reach Hugging Face again")
        self.retry.clicked.connect(self._retry)
        layout = QHBoxLayout(self)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.retry)
        self.setVisible(False)

    def _retry(self) -> None:
        self.set_checking(True)
        self.retry_requested.emit()

    def set_checking(self, checking: bool) -> None:
        """While the Hub is being asked again: Retry waits for the answer."""
        self.retry.setEnabled(not checking)
        self.retry.setText("Checking…" if checking else "Retry")
