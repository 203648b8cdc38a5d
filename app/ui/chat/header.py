"""The line above the thread: the chat's title, the context meter and the Settings toggle."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QToolButton, QWidget

from app.core.chat.context import IMAGE_TOKENS, context_usage, estimate_tokens, history_for_request
from app.core.chat.store import DEFAULT_TITLE
from app.ui.chat.messages_model import Row
from app.ui.theme import restyle_by, set_status
from app.ui.widgets.elided_label import ElidedLabel

# What the chat's title keeps (some 16 characters) before the meter's "Context" caption takes room from it.
TITLE_ROOM_PX = 110
_LEVEL_WARNING = {"ok": "", "warn": " · near the limit", "full": " · context full"}


def tokens_in_use(rows: Sequence[Row], system_prompt: str) -> tuple[int, str]:
    """(tokens, "" when measured or "~" when estimated) for the shown thread.

    The newest reply with stats measured its prompt and its own tokens; only the turns after it are
    estimated (no re-count of a 1,000-message history on every send). Without stats, all is estimated."""
    for i in range(len(rows) - 1, -1, -1):
        stats = rows[i].stats
        if stats and stats.get("prompt_tokens"):
            measured = int(stats["prompt_tokens"]) + int(stats.get("generated_tokens", 0))
            after = history_for_request("", rows[i + 1 :])
            images = IMAGE_TOKENS * sum(r.image_count for r in rows[i + 1 :])
            return (measured + estimate_tokens(after) - 2 + images, "~") if after else (measured, "")
    msgs = history_for_request(system_prompt, rows)
    return (estimate_tokens(msgs) + IMAGE_TOKENS * sum(r.image_count for r in rows) if msgs else 0), "~"


def _short(tokens: int) -> str:
    """A count for the meter's reading: whole up to 10,239, then in k of 1,024 as contexts are named ("128k")."""
    return f"{tokens:,}" if tokens < 10_240 else f"{tokens / 1024:.0f}k"


class ContextMeter(QWidget):
    """A "Context" caption, a thin bar and its reading ("~1,234 / 4,096 tokens · near the limit"); hidden until
    there is a reading."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = QLabel("Context")
        set_status(self.caption, "muted")
        self.bar = QProgressBar()
        self.bar.setObjectName("contextMeter")
        self.bar.setAccessibleName("Context used")
        self.bar.setFixedSize(52, 6)  # narrow: the title, Documents, Tools and Settings share the row at 900 px
        self.bar.setTextVisible(False)
        restyle_by(self.bar, "level", "ok")  # the theme draws the whole bar (hearth.qss), not a blank box
        self.label = QLabel()
        self.label.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Preferred)
        layout = self._row = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.caption)
        layout.addWidget(self.bar, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addWidget(self.label)
        self.clear()

    def clear(self) -> None:
        self.label.setText("")
        self.bar.setValue(0)
        self._reading = False
        self.caption.setVisible(False)
        self.bar.setVisible(False)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        # Without the caption: on a narrow window the header drops it (show_caption) rather than widen the window.
        hint = super().minimumSizeHint()
        if not self.caption.isHidden():
            hint.setWidth(hint.width() - self.caption_width())
        return hint

    def caption_width(self) -> int:
        """What the caption adds to the row when it shows."""
        return self.caption.sizeHint().width() + self._row.spacing()

    def show_caption(self, room: bool) -> None:
        """The header's call: the "Context" caption shows while there is a reading and room for it."""
        if self.caption.isHidden() == (room and self._reading):
            self.caption.setVisible(room and self._reading)

    def show_usage(self, used: int, n_ctx: int, approx: str = "") -> None:
        level = context_usage(used, n_ctx)
        self.bar.setRange(0, n_ctx)
        self.bar.setValue(min(used, n_ctx))
        restyle_by(self.bar, "level", level)
        # Short beside its "Context" caption (the title needs the room on a 900 px window); whole in the tooltip.
        reading = f"{approx}{_short(used)} / {_short(n_ctx)}{_LEVEL_WARNING[level]}"
        whole = f"Context: {approx}{used:,} of {n_ctx:,} tokens used{_LEVEL_WARNING[level]}"
        # Room for this context's widest reading up front: a label that grows while text streams gets
        # clipped; the widest of any context (131,072) would take the chat title's room.
        widest = f"~{_short(n_ctx)} / {_short(n_ctx)}"
        self.label.setMinimumWidth(self.label.fontMetrics().horizontalAdvance(widest))
        self.label.setText(reading)
        self.label.setProperty("level", level)
        for part in (self.caption, self.bar, self.label):
            part.setToolTip(whole)
        self._reading = True
        self.caption.setVisible(True)
        self.bar.setVisible(True)


class ChatHeader(QWidget):
    """`settings_button` toggles the settings panel; `tools_button` opens the Tools menu (chat_tools.py),
    `documents_button` the Documents menu (chat_documents.py)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = ElidedLabel(DEFAULT_TITLE)
        self.title.setObjectName("chatTitle")
        self.title.setMinimumWidth(40)  # a long title shrinks (ending in "…"), not the meter
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.meter = ContextMeter()
        self.settings_button = QToolButton()
        self.settings_button.setText("Settings")
        self.settings_button.setCheckable(True)
        self.tools_button = QToolButton()
        self.tools_button.setObjectName("toolsButton")
        self.tools_button.setText("Tools")
        self.documents_button = QToolButton()
        self.documents_button.setObjectName("documentsButton")
        self.documents_button.setText("Documents")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title, 1)
        layout.addWidget(self.meter)
        layout.addWidget(self.documents_button)
        layout.addWidget(self.tools_button)
        layout.addWidget(self.settings_button)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt API)
        super().resizeEvent(event)
        self._fit_caption()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a reading shown or a button's text changed
            self._fit_caption()
        return super().event(event)

    def _fit_caption(self) -> None:
        """The meter's caption shows only where the row has room for it after the title's first words: with
        Documents, Tools and Settings beside the meter, a 900 px window's chat row has room for one of them."""
        title_room = max(0, TITLE_ROOM_PX - self.title.minimumWidth())
        self.meter.show_caption(
            self.width() >= self.minimumSizeHint().width() + title_room + self.meter.caption_width()
        )
