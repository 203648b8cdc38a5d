"""The embedding model (and reranker) Hearth recommends for this machine, each with one button that downloads
it through the Downloads queue and, once it is in My Models, puts it to use: a collection made with the
embedding model, the reranker named in Settings for searches.

The buttons read the shared DownloadFeed (download_button.py), which follows the download manager and the
library on the main thread; the Hub is only reached by the Downloads page's request, on the pool."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.documents.recommend import Suggestion
from app.core.formats import GGUF
from app.core.library import LocalModel
from app.core.library.download_view import ButtonView
from app.core.models.recommend import Variant
from app.core.units import fmt_bytes
from app.ui.download_button import DownloadFeed
from app.ui.theme import restyle_by, set_status
from app.ui.widgets.message_label import MessageLabel, as_sentences

NEEDS_MODEL_TITLE = "Documents need an embedding model"
NEEDS_MODEL_TEXT = (
    "An embedding model turns each passage of your files into numbers that Hearth searches by meaning. "
    "It runs on this computer; your files never leave it. These fit this machine:"
)
WAITING_FOR_MACHINE = "Reading this machine's memory and cores to pick the models that fit it…"
ROLE_WORDS = {"embedding": "Embedding model", "rerank": "Reranker (optional)"}


def variant_of(s: Suggestion) -> Variant:
    """The download a suggestion means: its repo's quant, resolved to files on the pool when requested."""
    return Variant(label=s.quant, format=GGUF, size_bytes=s.size_bytes, repo_id=s.repo, revision="main")


def use_view(s: Suggestion, model: LocalModel, in_use: bool) -> ButtonView:
    """The button once the model is in My Models: what it is put to use for."""
    if s.role == "embedding":
        return ButtonView("Make a collection with it", True, "chat", f"A new collection embedded by {model.name}")
    if in_use:
        return ButtonView("Used for searches", False, "none", f"{model.name} is the reranker in Settings → Documents")
    return ButtonView("Use for searches", True, "chat", f"Name {model.name} as the reranker in Settings → Documents")


class SuggestionRow(QWidget):
    """One suggestion: its name, size and why, and its button (Download, progress, Retry, then its use)."""

    use_requested = Signal(object, object)  # Suggestion, LocalModel: main thread

    def __init__(
        self,
        suggestion: Suggestion,
        feed: DownloadFeed | None,
        request_download: Callable[[Variant], None] | None,
        in_use: Callable[[LocalModel], bool],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.suggestion = suggestion
        self.variant = variant_of(suggestion)
        self._feed = feed
        self._request = request_download
        self._in_use = in_use
        self._item_id: str | None = None
        self._model: LocalModel | None = None
        self.view = ButtonView("Download", request_download is not None, "download")
        name = suggestion.repo.split("/", 1)[-1].removesuffix("-GGUF")
        self.title = QLabel(
            f"{ROLE_WORDS[suggestion.role]}: {name} · {suggestion.quant} · {fmt_bytes(suggestion.size_bytes)}"
        )
        self.title.setObjectName("cardTitle")
        self.why = MessageLabel(as_sentences(suggestion.why))
        set_status(self.why, "muted")
        self.error = MessageLabel()
        set_status(self.error, "error")
        self.error.setVisible(False)
        self.button = QPushButton("Download")
        self.button.clicked.connect(self._clicked)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 4, 0, 4)
        grid.addWidget(self.title, 0, 0)
        grid.addWidget(self.why, 1, 0)
        grid.addWidget(self.button, 0, 1, 2, 1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        grid.addWidget(self.error, 2, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        if feed is not None:
            feed.updated.connect(self.refresh)  # a slot of this QObject: dropped when the row is deleted
        self.refresh()

    def refresh(self) -> None:
        """Main thread: what the download and the library say now."""
        if self._feed is None:
            why = f"Download it with `hearth pull {self.suggestion.spec}`"
            view = ButtonView("Download", self._request is not None, "download", "" if self._request else why)
            item = model = None
        else:
            view, item, model = self._feed.state(self.variant)
            if view.action == "chat" and model is not None:
                view = use_view(self.suggestion, model, self._in_use(model))
        self.view, self._item_id, self._model = view, item.id if item is not None else None, model
        self.button.setText(view.text)
        self.button.setEnabled(view.enabled)
        self.button.setToolTip(as_sentences(view.tooltip) if view.tooltip else "")
        restyle_by(self.button, "role", "primary" if view.enabled and self.suggestion.role == "embedding" else None)
        self.error.setText(as_sentences(view.tooltip.split("\n", 1)[0]) if view.error else "")
        self.error.setVisible(bool(view.error))

    def _clicked(self) -> None:
        action = self.view.action
        if action == "download" and self._request is not None:
            self._request(self.variant)
        elif action in ("retry", "resume") and self._feed is not None and self._item_id is not None:
            self._feed.act(action, self._item_id)
        elif action == "chat" and self._model is not None:
            self.use_requested.emit(self.suggestion, self._model)


class SuggestionsCard(QFrame):
    """What the page shows while the library has no embedding model: the picks for this machine."""

    use_requested = Signal(object, object)  # Suggestion, LocalModel

    def __init__(
        self,
        feed: DownloadFeed | None,
        request_download: Callable[[Variant], None] | None,
        in_use: Callable[[LocalModel], bool],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("card")
        self._feed = feed
        self._request = request_download
        self._in_use = in_use
        self.rows: list[SuggestionRow] = []
        self.title = QLabel(NEEDS_MODEL_TITLE)
        self.title.setObjectName("cardTitle")
        self.text = MessageLabel(WAITING_FOR_MACHINE)
        self.note = MessageLabel()  # why no reranker is suggested here
        set_status(self.note, "muted")
        self.note.setVisible(False)
        self._rows = QVBoxLayout()
        self._rows.setSpacing(4)
        layout = QVBoxLayout(self)
        layout.setSpacing(8)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        layout.addLayout(self._rows)
        layout.addWidget(self.note)
        self.suggestions: list[Suggestion] | None = None

    def set_suggestions(self, suggestions: list[Suggestion], no_reranker: str | None) -> None:
        """Main thread: the picks for this machine (recommend.py), and why there is no reranker among them."""
        if suggestions == self.suggestions:
            return
        self.suggestions = list(suggestions)
        for row in self.rows:
            self._rows.removeWidget(row)
            row.deleteLater()
        self.rows = []
        for s in suggestions:
            row = SuggestionRow(s, self._feed, self._request, self._in_use)
            row.use_requested.connect(self.use_requested.emit)
            self.rows.append(row)
            self._rows.addWidget(row)
        self.text.setText(NEEDS_MODEL_TEXT)
        self.note.setText(as_sentences(no_reranker) if no_reranker else "")
        self.note.setVisible(bool(no_reranker))

    def refresh(self) -> None:
        for row in self.rows:
            row.refresh()
