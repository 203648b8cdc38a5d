"""Where indexing is, above the collections: "file 3 of 40 · 212 passages · about 2 min left", a Pause/Resume
button, "waiting for the chat" while a reply is being written, and why the last run stopped if it did."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QProgressBar, QPushButton, QWidget

from app.core.documents.service import IndexStatus
from app.core.units import fmt_eta
from app.ui.theme import set_status
from app.ui.widgets.elided_label import ElidedLabel

WAITING_FOR_CHAT = "Waiting for the chat: its reply is written first"


def progress_text(status: IndexStatus) -> str:
    """One line for the run in progress ("" when idle)."""
    if status.collection is None:
        return f"Waiting to index {', '.join(status.queued)}" if status.queued else ""
    p = status.progress
    parts = [f"Indexing {status.collection}"]
    if p is not None and p.files_total:
        parts.append(f"file {min(p.files_done + 1, p.files_total)} of {p.files_total}")
        parts.append(f"{p.passages} passage{'s' if p.passages != 1 else ''}")
        if p.seconds_left is not None and p.files_done < p.files_total:
            parts.append("about " + fmt_eta(p.seconds_left))
    elif p is not None:
        parts.append("nothing new to read")
    else:
        parts.append("looking for new and changed files")
    return " · ".join(parts)


def hold_text(status: IndexStatus) -> str:
    """Why the run is not moving, when it is held ("" when it is)."""
    if status.paused:
        return "Paused"
    if status.waiting_for_chat:
        return WAITING_FOR_CHAT
    return ""


class ProgressStrip(QFrame):
    """Main thread: shows the latest IndexStatus; Pause/Resume asks the page (pause_clicked/resume_clicked)."""

    pause_clicked = Signal()
    resume_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self.status = IndexStatus()
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.text = ElidedLabel()
        self.file = ElidedLabel()  # the file being read: long paths elide, the whole path is the tooltip
        set_status(self.file, "muted")
        self.hold = QLabel()
        set_status(self.hold, "warning")
        self.error = QLabel()
        self.error.setWordWrap(True)
        set_status(self.error, "error")
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self._toggle)
        grid = QGridLayout(self)
        grid.addWidget(self.text, 0, 0)
        grid.addWidget(self.pause_button, 0, 1, 2, 1)
        grid.addWidget(self.bar, 1, 0)
        grid.addWidget(self.hold, 2, 0, 1, 2)
        grid.addWidget(self.file, 3, 0, 1, 2)
        grid.addWidget(self.error, 4, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        self.show_status(self.status)

    def show_status(self, status: IndexStatus) -> None:
        self.status = status
        running = status.collection is not None
        p = status.progress
        self.text.setText(progress_text(status))
        self.hold.setText(hold_text(status))
        self.hold.setVisible(bool(self.hold.text()) and (running or status.paused))
        if p is not None and p.files_total:
            self.bar.setRange(0, p.files_total)
            self.bar.setValue(p.files_done)
        else:
            self.bar.setRange(0, 0 if running else 1)  # busy while it looks for files; empty when idle
            self.bar.setValue(0)
        self.bar.setVisible(running or bool(status.queued))
        self.file.setText(str(p.file) if running and p is not None and p.file is not None else "")
        self.file.setVisible(bool(self.file.full_text()))
        self.error.setText(f"Indexing stopped: {status.error}" if status.error else "")
        self.error.setVisible(bool(status.error))
        self.pause_button.setText("Resume" if status.paused else "Pause")
        self.pause_button.setVisible(status.busy or status.paused)
        # Nothing to say: the strip takes no room (the collections below get it).
        self.setVisible(status.busy or status.paused or bool(status.error))

    def _toggle(self) -> None:
        (self.resume_clicked if self.status.paused else self.pause_clicked).emit()
