"""The chat composer (Enter sends) and the context meter shown above the thread."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QPushButton, QSizePolicy

from app.core.chat.context import context_usage, estimate_tokens, history_for_request

_LEVEL_COLOUR = {"ok": "#2da44e", "warn": "#d4a72c", "full": "#cf222e"}
_LEVEL_WARNING = {"ok": "", "warn": " · near the limit", "full": " · context full"}


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter is a newline."""

    submitted = Signal()

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt API)
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def reason_not_to_send(state, replying: bool) -> str:
    """Why sending is not possible now ('' when it is), given the host's state."""
    if state.status == "loading":
        return "Loading the model…"
    if state.model is None:
        return "The model failed to load (see above)" if state.status == "error" else "Load a model to chat"
    if replying:
        return "Replying… (Esc to stop)"
    return ""


class ComposerControls:
    """The composer, the line saying why sending waits, and the Regenerate / Stop / Send row; the page wires them."""

    def __init__(self) -> None:
        self.composer = Composer()
        self.composer.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.composer.setMaximumHeight(110)
        self.reason = QLabel()
        self.reason.setObjectName("composerReason")
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.regen_button = QPushButton("Regenerate")
        self.row = QHBoxLayout()
        self.row.addWidget(self.reason, 1)
        for b in (self.regen_button, self.stop_button, self.send_button):
            self.row.addWidget(b)

    def refresh(self, reason: str, *, loaded: bool, editing: bool, busy: str, replying: bool,
                can_regenerate: bool) -> None:
        """Enable what can be used now; the reason line says why the rest waits (or what is being edited)."""
        self.composer.setEnabled(loaded)
        edit = "Editing a message: Enter resends it, Esc cancels" if editing else ""
        self.reason.setText(reason or edit or (f"{busy}: your message waits its turn" if busy else ""))
        self.send_button.setEnabled(not reason and bool(self.composer.toPlainText().strip()))
        self.stop_button.setEnabled(replying)
        self.regen_button.setEnabled(not reason and can_regenerate)


def tokens_in_use(rows, system_prompt: str) -> tuple[int, str]:
    """(tokens, "" when measured or "~" when estimated) for the shown thread.

    The newest reply with stats measured its prompt and its own tokens; only the turns after it are
    estimated (no re-count of a 1,000-message history on every send). Without stats, all is estimated."""
    for i in range(len(rows) - 1, -1, -1):
        stats = rows[i].stats
        if stats and stats.get("prompt_tokens"):
            measured = int(stats["prompt_tokens"]) + int(stats.get("generated_tokens", 0))
            after = history_for_request("", rows[i + 1:])
            return (measured + estimate_tokens(after) - 2, "~") if after else (measured, "")
    msgs = history_for_request(system_prompt, rows)
    return (estimate_tokens(msgs) if msgs else 0), "~"


class ContextMeter:
    """A bar and a caption ("~1,234 / 4,096 tokens · near the limit"); the page lays both out."""

    def __init__(self) -> None:
        self.bar = QProgressBar()
        self.bar.setObjectName("contextMeter")
        self.bar.setMaximumWidth(160)
        self.bar.setTextVisible(False)
        self.label = QLabel()
        self.label.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Preferred)
        # Room for the widest reading up front: a label that grows while text streams gets clipped.
        self.label.setMinimumWidth(self.label.fontMetrics().horizontalAdvance("131,072 / 131,072 tokens"))

    def clear(self) -> None:
        self.label.setText("")
        self.bar.setValue(0)

    def show_usage(self, used: int, n_ctx: int, approx: str = "") -> None:
        level = context_usage(used, n_ctx)
        self.bar.setRange(0, n_ctx)
        self.bar.setValue(min(used, n_ctx))
        self.bar.setStyleSheet(f"QProgressBar::chunk {{ background: {_LEVEL_COLOUR[level]}; }}")
        self.label.setText(f"{approx}{used:,} / {n_ctx:,} tokens{_LEVEL_WARNING[level]}")
        self.label.setProperty("level", level)
