"""Messages for the user that wrap inside their card: errors as capitalised, separate sentences, and a label
whose long unbroken words (URLs, exception text) break instead of widening the page."""

from __future__ import annotations

import re

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QWidget

# Invisible break points: a line may break here, nothing is drawn. Qt breaks plain text only between words,
# so a 100-character URL would otherwise set the label's (and so the page's) minimum width.
_BREAK = "\u200b"
_LONG_WORD = 24  # characters; shorter words fit any card
_AFTER = re.compile(r"([/?&=_.:,\-\]\)])")  # where a URL or a Python repr reads naturally split
_STOPS = (".", "!", "?", "…")


def as_sentences(text: str) -> str:
    """An error as sentences: the core and libraries write "can't reach X; check your connection", lower
    case and joined by a semicolon. Each clause becomes a sentence with a capital and a full stop."""
    parts = [p.strip() for p in text.strip().split("; ")]
    return " ".join(_sentence(p) for p in parts if p)


def _sentence(part: str) -> str:
    part = capitalised(part)
    return part if part.endswith(_STOPS) else part + "."


def capitalised(text: str) -> str:
    """`text` with its first word capitalised when it is a plain word ("can't" → "Can't"); a first word that
    is a name as written ("org/model", "mlx-community", "llama.cpp") is left as it is."""
    text = text.strip()
    first = text.split(" ", 1)[0]
    return text[:1].upper() + text[1:] if re.fullmatch(r"[a-z]+(?:'[a-z]+)?,?", first) else text


def breakable(text: str) -> str:
    """`text` with invisible break points in its long words, so word wrap can split them."""

    def split(word: str) -> str:
        if len(word) < _LONG_WORD:
            return word
        word = _AFTER.sub(r"\1" + _BREAK, word)
        # A long run with none of those characters (a hash, a token) still breaks every 16 characters.
        return re.sub(r"([^" + _BREAK + r"]{16})(?=[^" + _BREAK + r"])", r"\1" + _BREAK, word)

    return re.sub(r"\S+", lambda m: split(m.group(0)), text)


class MessageLabel(QLabel):
    """A word-wrapped plain-text label that never widens its layout: long words break at invisible points.
    `text()` is the message as given; only what is painted holds the break points."""

    def __init__(self, text: str = "", parent: QWidget | None = None, *, min_lines: int = 0) -> None:
        """`min_lines`: at least this many lines tall whatever the text, so a text that changes keeps the
        layout below it still (measured in the font it has when laid out: the style sheet's, once polished)."""
        super().__init__(parent)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._message = ""
        self._min_lines = min_lines
        self.setText(text)

    def _lines_height(self) -> int:
        if not self._min_lines:
            return 0
        margins = self.contentsMargins()
        lines = self.fontMetrics().boundingRect(
            0, 0, 10_000, 0, Qt.TextFlag.TextWordWrap, "\n".join(["X"] * self._min_lines)
        )
        return lines.height() + margins.top() + margins.bottom() + 2 * self.margin()

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt API)
        return max(super().heightForWidth(width), self._lines_height())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt API)
        hint = super().sizeHint()
        return QSize(hint.width(), max(hint.height(), self._lines_height()))

    def setText(self, text: str) -> None:  # noqa: N802 (Qt API)
        self._message = text
        # Rich text keeps its markup as written: a break point inside a link's address would break the link.
        rich = self.textFormat() == Qt.TextFormat.RichText
        super().setText(text if rich else breakable(text))

    def text(self) -> str:
        return self._message

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt API): a few words wide at least, never a URL wide
        hint = super().minimumSizeHint()
        width = min(hint.width(), 12 * self.fontMetrics().averageCharWidth())
        return QSize(width, max(hint.height(), self._lines_height()))
