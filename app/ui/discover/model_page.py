"""A Hub repo's model card, rendered with nothing remote loaded (the page's data: app.core.hub.repo_page)."""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QTextBrowser, QWidget

_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)


def render_markdown(text: str) -> str:
    """Model card markdown → HTML; raw HTML in the card is escaped, the YAML front matter dropped."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return md.render(_FRONT_MATTER.sub("", text, count=1))


class CardBrowser(QTextBrowser):
    """Shows a model card. Links open only when clicked, in the system browser; remote images never load."""

    link_clicked = Signal(QUrl)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(False)
        self.setOpenLinks(False)
        self.blocked: list[str] = []  # remote resources the card asked for and did not get
        self.anchorClicked.connect(self._clicked)

    def loadResource(self, kind: int, url: QUrl | str) -> Any:  # noqa: N802 (Qt API)
        # A card is third-party content: fetching its images would tell a tracker who looked at it.
        url = QUrl(url)
        if url.scheme().lower() in ("http", "https", "ftp") or url.isRelative() or url.isLocalFile():
            self.blocked.append(url.toString())
            return None
        return super().loadResource(kind, url)

    def show_markdown(self, text: str) -> None:
        self.blocked = []
        self.document().setDefaultStyleSheet("img { max-width: 100%; }")
        self.setHtml(render_markdown(text))

    def _clicked(self, url: QUrl) -> None:
        self.link_clicked.emit(url)
        if url.scheme().lower() in ("http", "https"):
            QDesktopServices.openUrl(url)
