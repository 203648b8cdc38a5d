"""The chat composer: the message box (Enter sends; images and documents pasted or dropped on it), the images and
document files waiting to be sent, the line saying why sending waits, and the Image… / Regenerate / Stop / Send
row. It owns its widgets; the reply controller reads and fills the text, the image attacher (attachments.py) and
the chat's documents (chat_documents.py) fill the strips."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice, QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.chat.attachments import IMAGE_SUFFIXES, Attachment
from app.core.chat.retrieval import AttachedDocument
from app.core.documents.parsing import SUPPORTED_SUFFIXES
from app.core.engines.base import ImageInput
from app.core.formats import GGUF
from app.core.runtime.jobs import HostState
from app.ui.chat.attachment_strip import AttachmentStrip, DocumentStrip


@dataclass(frozen=True)
class Draft:
    """What the composer holds: the text and the images and document files attached to it."""

    text: str = ""
    attachments: tuple[Attachment, ...] = ()
    documents: tuple[AttachedDocument, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.text.strip() and not self.attachments and not self.documents


def image_files(mime: QMimeData) -> list[Path]:
    """The local image files a drop or paste carries (by name; their content is checked when read)."""
    if not mime.hasUrls():
        return []
    paths = [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]
    return [p for p in paths if p.suffix.lower() in IMAGE_SUFFIXES]


def document_files(mime: QMimeData) -> list[Path]:
    """The local document files (PDF, DOCX, Markdown, text…) a drop or paste carries; images are not among them."""
    if not mime.hasUrls():
        return []
    paths = [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]
    return [p for p in paths if p.suffix.lower() in SUPPORTED_SUFFIXES and p.suffix.lower() not in IMAGE_SUFFIXES]


def _png_of(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs want bytes; PySide6 takes str
    return bytes(buffer.data().data())


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter is a newline; Tab and Shift+Tab move the focus, as in any form."""

    submitted = Signal()
    files_given = Signal(list)  # image files dropped or pasted: list[Path]
    documents_given = Signal(list)  # document files dropped or pasted: list[Path]
    image_pasted = Signal(bytes)  # a picture from the clipboard, as PNG

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # A chat message hardly needs a tab character; keyboard users need a way out of the box.
        self.setTabChangesFocus(True)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt API)
        return (
            bool(image_files(source) or document_files(source))
            or source.hasImage()
            or super().canInsertFromMimeData(source)
        )

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt API); paste and drop
        """Image and document files and pictures become attachments; text is typed in as usual."""
        images, documents = image_files(source), document_files(source)
        if images or documents:
            if images:
                self.files_given.emit(images)
            if documents:
                self.documents_given.emit(documents)
        elif source.hasImage() and not source.hasText():  # a copied picture; a copied page keeps its text
            image = source.imageData()
            if isinstance(image, QImage) and not image.isNull():
                self.image_pasted.emit(_png_of(image))
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt API)
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def reason_not_to_send(state: HostState, replying: bool, images: int = 0) -> str:
    """Why sending is not possible now ('' when it is), given the host's state and the images attached."""
    if state.status == "loading":
        return "Loading the model…"
    if state.model is None:
        return "The model failed to load (see above)" if state.status == "error" else "Load a model to chat"
    if replying:
        return "Replying… (Esc to stop)"
    if images and (why := vision_reason(state)):
        return f"{why}. Remove the images, or load a model that can see."
    return ""


def vision_reason(state: HostState) -> str:
    """Why the loaded model cannot take images ('' when it can: loaded with a vision projector, or mlx-vlm for an
    MLX model, which its info names; an MLX model's info says why it cannot)."""
    model = state.model
    if model is None or state.status == "loading":
        return "Load a model that can see images first"
    if model.extra.get("projector"):
        return ""
    if model.extra.get("no_vision"):
        return str(model.extra["no_vision"])
    if model.format == GGUF:
        return (
            f"{model.path.name} cannot see images: it was loaded without a vision projector (an mmproj file);"
            " models marked Vision in Discover have one"
        )
    return f"{model.path.name} cannot see images here: images need a GGUF model with a vision projector or an MLX one"


class ComposerBox(QWidget):
    """`send_requested` (Enter or Send), `stop_requested`, `regenerate_requested`, `text_changed` (the text or
    the images changed)."""

    send_requested = Signal()
    stop_requested = Signal()
    regenerate_requested = Signal()
    text_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.editor = Composer()
        self.editor.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.editor.setMaximumHeight(110)
        self.reason = QLabel()
        self.reason.setObjectName("composerReason")
        self.send_button = QPushButton("Send")
        self.send_button.setProperty("role", "primary")
        self.stop_button = QPushButton("Stop")
        self.regen_button = QPushButton("Regenerate")
        self.attach_button = QPushButton("Image…")
        self.attach_button.setAccessibleName("Attach an image")
        self.attachments = AttachmentStrip()
        self.documents = DocumentStrip()
        self.editor.submitted.connect(self.send_requested)
        self.editor.textChanged.connect(self.text_changed)
        self.attachments.changed.connect(self.text_changed)
        self.documents.changed.connect(self.text_changed)
        self.send_button.clicked.connect(lambda: self.send_requested.emit())
        self.stop_button.clicked.connect(lambda: self.stop_requested.emit())
        self.regen_button.clicked.connect(lambda: self.regenerate_requested.emit())
        row = QHBoxLayout()
        row.addWidget(self.attach_button)
        row.addWidget(self.reason, 1)
        for b in (self.regen_button, self.stop_button, self.send_button):
            row.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.attachments)
        layout.addWidget(self.documents)
        layout.addWidget(self.editor)
        layout.addLayout(row)

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str) -> None:
        self.editor.setPlainText(text)

    def images(self) -> list[ImageInput]:
        return [a.image for a in self.attachments.attachments]

    def draft(self) -> Draft:
        return Draft(self.text(), tuple(self.attachments.attachments), tuple(self.documents.documents))

    def set_draft(self, draft: Draft) -> None:
        self.set_text(draft.text)
        self.attachments.set_attachments(draft.attachments)
        self.documents.set_documents(draft.documents)

    def clear(self) -> None:
        """The text, the images and the document files: sent, or the edit cancelled."""
        self.editor.clear()
        self.attachments.set_attachments(())
        self.documents.set_documents(())

    def focus(self) -> None:
        self.editor.setFocus()

    def refresh(
        self, reason: str, *, loaded: bool, editing: bool, busy: str, replying: bool, can_regenerate: bool
    ) -> None:
        """Enable what can be used now; the reason line says why the rest waits (or what is being edited)."""
        self.editor.setEnabled(loaded)
        edit = "Editing a message: Enter resends it, Esc cancels" if editing else ""
        self.reason.setText(reason or edit or (f"{busy}: your message waits its turn" if busy else ""))
        self.send_button.setEnabled(not reason and not self.draft().empty)
        self.stop_button.setEnabled(replying)
        self.regen_button.setEnabled(not reason and can_regenerate)
