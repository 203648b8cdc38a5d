"""How images reach the composer: the Image… button, paste and drag-and-drop. Each is read and checked on the
pool (app.core.chat.attachments) and shown when it passes; a refusal says why. A model that cannot see greys
the button, with the reason in its tooltip."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

from app.core.chat.attachments import IMAGE_SUFFIXES, MAX_ATTACHED, Attachment, prepare_image, read_image_file
from app.ui.chat.composer import ComposerBox
from app.ui.tasks import TaskRunner

logger = logging.getLogger(__name__)

FILTER = "Images (" + " ".join(f"*{s}" for s in IMAGE_SUFFIXES) + ")"


class ImageAttacher(QObject):
    """`notice(text, level)` (UI thread): an image refused, or the model cannot take images."""

    notice = Signal(str, str)

    def __init__(self, composer: ComposerBox, tasks: TaskRunner, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.composer, self.tasks = composer, tasks
        self.reason = "Load a model that can see images first"  # '' when the loaded model can see
        self.pending = 0  # images being read
        composer.attach_button.clicked.connect(self.choose_files)
        composer.editor.files_given.connect(self.add_files)
        composer.editor.image_pasted.connect(lambda data: self.add_data(data, "Pasted image"))
        self.set_reason(self.reason)

    def set_reason(self, reason: str) -> None:
        """UI thread: why images cannot be attached now ('' when they can)."""
        self.reason = reason
        button = self.composer.attach_button
        button.setEnabled(not reason)
        button.setToolTip(reason or "Attach images (or paste or drop them on the message box)")

    def choose_files(self) -> None:
        names, _filter = QFileDialog.getOpenFileNames(self.composer, "Attach images", str(Path.home()), FILTER)
        self.add_files([Path(n) for n in names])

    def _room(self, wanted: int) -> int:
        """How many of `wanted` more images fit in the message; says so when some do not."""
        if self.reason:
            self.notice.emit(f"Cannot attach images: {self.reason}.", "error")
            return 0
        room = MAX_ATTACHED - len(self.composer.attachments.attachments) - self.pending
        if wanted > room:
            self.notice.emit(
                f"A message takes {MAX_ATTACHED} images at most; {wanted - max(room, 0)} left out.", "error"
            )
        return max(0, min(room, wanted))

    def add_files(self, paths: Sequence[Path]) -> None:
        for path in list(paths)[: self._room(len(paths))]:
            self._read(lambda p=path: read_image_file(p))

    def add_data(self, data: bytes, name: str) -> None:
        if self._room(1):
            self._read(lambda: prepare_image(data, name))

    def _read(self, op) -> None:
        self.pending += 1
        self.tasks.run(op, self._ready, self._refused, owner=self.composer)

    def _ready(self, attachment: Attachment) -> None:
        """UI thread."""
        self.pending -= 1
        self.composer.attachments.add(attachment)

    def _refused(self, exc: BaseException) -> None:
        """UI thread: the image cannot be read or would be refused by the engine."""
        self.pending -= 1
        logger.info("image not attached: %s", exc)
        self.notice.emit(f"Not attached: {exc}", "error")
