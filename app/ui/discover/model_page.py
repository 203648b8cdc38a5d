"""A Hub repo's page: its model card (rendered, nothing remote loaded) and its variants assessed for this machine."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QTextBrowser

from app.core.errors import HearthError
from app.core.hub.client import HubClient
from app.core.hub.errors import HubGated
from app.core.hub.metadata import assessable_variants
from app.core.hub.variants import repo_variants
from app.core.models.devices import Machine
from app.core.models.recommend import Recommendation, assess

logger = logging.getLogger(__name__)

_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.DOTALL)


def render_markdown(text: str) -> str:
    """Model card markdown → HTML; raw HTML in the card is escaped, the YAML front matter dropped."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return md.render(_FRONT_MATTER.sub("", text, count=1))


class CardBrowser(QTextBrowser):
    """Shows a model card. Links open only when clicked, in the system browser; remote images never load."""

    link_clicked = Signal(QUrl)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(False)
        self.setOpenLinks(False)
        self.blocked: list[str] = []  # remote resources the card asked for and did not get
        self.anchorClicked.connect(self._clicked)

    def loadResource(self, kind: int, url: QUrl) -> Any:  # noqa: N802 (Qt API)
        # A card is third-party content: fetching its images would tell a tracker who looked at it.
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


@dataclass
class HubModel:
    """Everything the model view needs for a Hub repo, gathered on a worker thread."""

    repo_id: str
    subtitle: str
    card: str
    recommendation: Recommendation
    machine: Machine
    notice: str = ""  # gated: what the user must do; or why variant details are missing


def load_hub_model(client: HubClient, repo_id: str, machine: Machine | None, n_ctx: int = 8192) -> HubModel:
    """Runs on the pool: details, card and variants with metadata read remotely (GGUF headers by Range)."""
    if machine is None:
        from app.core.hardware import probe_hardware
        from app.core.models.devices import machine_from_profile

        machine = machine_from_profile(probe_hardware(measure_bandwidth=False))
    details = client.model(repo_id)
    notice, card = "", ""
    try:
        card = client.model_card(repo_id, details.sha)
    except HubGated as exc:
        notice = str(exc)
    if details.gated and not notice:
        first = next((f for f in details.files if f.path.lower().endswith((".gguf", ".safetensors"))), None)
        if first is not None:
            try:
                client.file_metadata(repo_id, first.path, details.sha)
            except HubGated as exc:
                notice = str(exc)
    if notice:
        # Without access the headers cannot be read: list what the file listing says (sizes), fit estimated.
        variants = [c.to_variant() for c in repo_variants(client, repo_id)]
    else:
        try:
            variants = assessable_variants(client, repo_id, details.sha)
        except HearthError as exc:
            logger.info("reading %s remotely failed: %s", repo_id, exc)
            variants = [c.to_variant() for c in repo_variants(client, repo_id)]
            notice = f"Could not read the model files' details ({exc}); sizes only."
    lic = details.card_data.get("license") if isinstance(details.card_data, dict) else None
    bits = [f"by {repo_id.split('/')[0]}", f"↓ {details.downloads:,}", f"♥ {details.likes:,}"]
    if lic:
        bits.append(f"licence {lic}")
    if details.gated:
        bits.append("gated")
    return HubModel(repo_id, " · ".join(bits), card, assess(variants, machine, n_ctx=n_ctx), machine, notice)

