"""One model: its variants table and, for the selected variant, the fit view; for a Hub repo also its card."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from app.core.models.devices import Machine
from app.core.models.recommend import Assessment, Recommendation
from app.ui.discover.model_page import CardBrowser
from app.ui.discover.variants_table import VariantsTable
from app.ui.widgets.fit_view import FitView


class ModelView(QWidget):
    back = Signal()
    download_requested = Signal(object)  # Assessment

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.machine: Machine | None = None
        self.recommendation: Recommendation | None = None
        self.fit_view: FitView | None = None
        self.back_button = back = QPushButton("← Back")
        back.setToolTip("Back to the results (Esc, Alt+Left)")
        back.clicked.connect(self.back.emit)
        # Esc and Alt+Left (a browser's Back) return to the results; only while this view has the focus,
        # so Esc elsewhere (the chat's stop) keeps its meaning.
        for keys in ("Esc", "Alt+Left"):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(self.back.emit)
        self.title = QLabel()
        self.title.setObjectName("pageTitle")
        self.subtitle = QLabel()
        self.subtitle.setWordWrap(True)
        self.why = QLabel()
        self.why.setWordWrap(True)
        self.notice = QLabel()  # gated repo: what to do; or why details are missing
        self.notice.setWordWrap(True)
        self.notice.setOpenExternalLinks(True)  # the gated repo's page, where its licence is accepted
        self.notice.setObjectName("notice")
        self.notice.setVisible(False)
        self.card = CardBrowser()
        self.card.setMinimumHeight(260)
        self.card.setVisible(False)
        self.table = VariantsTable()
        self.table.variant_selected.connect(self._show_fit)
        self.table.download_requested.connect(self.download_requested.emit)
        # A variant that cannot run here says why, instead of a fit that would read as if it could.
        self.cannot_run = QLabel()
        self.cannot_run.setWordWrap(True)
        self.cannot_run.setObjectName("notice")
        self.cannot_run.setVisible(False)
        self._fit_host = QVBoxLayout()
        self._fit_host.addWidget(self.cannot_run)
        body = QWidget()
        layout = QVBoxLayout(body)
        for w in (back, self.title, self.subtitle, self.notice, self.why, self.table):
            layout.addWidget(w)
        layout.addLayout(self._fit_host)
        layout.addWidget(self.card)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def show_model(self, title: str, subtitle: str, rec: Recommendation, machine: Machine | None) -> None:
        self.machine, self.recommendation = machine, rec
        self.title.setText(title)
        self.subtitle.setText(subtitle)
        self.why.setText(
            f"Recommended: {rec.recommended.variant.label} — {rec.why}"
            if rec.recommended
            else f"No variant fits this machine: {rec.why}"
        )
        self.table.locked = ""
        self.table.set_assessments(rec.assessments)
        self.show_notice("")
        self.card.setVisible(False)

    def show_notice(self, text: str) -> None:
        self.notice.setTextFormat(Qt.TextFormat.PlainText)
        self.notice.setText(text)
        self.notice.setVisible(bool(text))

    def show_access_needed(self, repo_id: str, page_url: str) -> None:
        """A gated repo this token cannot read: where to accept the licence, and no Download until then."""
        self.notice.setTextFormat(Qt.TextFormat.RichText)
        self.notice.setText(
            f"{html.escape(repo_id)} is gated: accept its licence on "
            f'<a href="{html.escape(page_url, quote=True)}">its page on the Hub</a>, then add a token in '
            "Settings → Hub. Downloads stay off until this token has access."
        )
        self.notice.setVisible(True)
        self.table.lock_downloads("This model is gated: accept its licence on the Hub and add a token first")

    def show_card(self, markdown: str) -> None:
        """The repo's model card, rendered without remote resources; hidden when the repo has none."""
        self.card.show_markdown(markdown)
        self.card.setVisible(bool(markdown.strip()))

    def _show_fit(self, a: Assessment) -> None:
        if self.fit_view is not None:
            self._fit_host.removeWidget(self.fit_view)
            self.fit_view.deleteLater()
            self.fit_view = None
        self.cannot_run.setVisible(not a.runnable)
        self.cannot_run.setText(f"{a.variant.label} cannot run on this machine: {a.reason}." if not a.runnable else "")
        if not a.runnable or a.plan is None or a.spec is None or self.machine is None:
            return
        self.fit_view = FitView(a.spec, self.machine, n_ctx=a.plan.requested_ctx, options=a.plan.options)
        self._fit_host.addWidget(self.fit_view)
