"""One model: its variants table and, for the selected variant, the fit view; for a Hub repo also its card."""

from __future__ import annotations

import html

from PySide6.QtCore import QSizeF, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLabel, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from app.core.models.devices import Machine
from app.core.models.planner import Plan
from app.core.models.recommend import Assessment, Recommendation, assess
from app.ui.discover.model_page import CardBrowser
from app.ui.discover.variants_table import VariantsTable
from app.ui.theme import set_status
from app.ui.widgets.fit_view import FitView
from app.ui.widgets.message_label import MessageLabel


class ModelView(QWidget):
    back = Signal()
    download_requested = Signal(object)  # Assessment
    plan_requested = Signal(str)  # a Hub repo id: plan a server for a model that does not fit here

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.machine: Machine | None = None
        self.slots = 1  # one conversation, as the Fit column and the chat's own load plan it
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
        self.subtitle = MessageLabel()
        self.why = MessageLabel()
        # Nothing fits here: say what would, on which hardware (issue 17's deployment plan).
        self.plan_button = QPushButton("Plan a server for it…")
        self.plan_button.setToolTip("Which GPUs it needs, the engine and the command that serves it")
        self.plan_button.clicked.connect(self._plan_clicked)
        self.plan_button.setVisible(False)
        self._plan_repo = ""
        self.source = QLabel()  # a link to the repo on the Hub, once the Hub answered
        self.source.setOpenExternalLinks(True)
        self.source.setTextFormat(Qt.TextFormat.RichText)
        self.source.setVisible(False)
        self.notice = MessageLabel()  # gated repo: what to do; or why details are missing
        self.notice.setOpenExternalLinks(True)  # the gated repo's page, where its licence is accepted
        self.notice.setObjectName("notice")
        self.notice.setVisible(False)
        self.card = CardBrowser()
        self.card.setVisible(False)
        # The card is as tall as its text and the page scrolls: a card that expanded to fill the page
        # squeezed the variants table to a row or two, and scrolled inside itself.
        self.card.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.card.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.card.document().documentLayout().documentSizeChanged.connect(self._fit_card)
        self.table = VariantsTable()
        # Its size hint is tall enough for its rows: keep that height, whatever is below it.
        self.table.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.table.variant_selected.connect(self._show_fit)
        self.table.download_requested.connect(self.download_requested.emit)
        self.download_error = MessageLabel()
        set_status(self.download_error, "error")
        self.download_error.setVisible(False)
        self.table.download_errors.connect(self._show_download_error)
        # A variant that cannot run here says why, instead of a fit that would read as if it could.
        self.cannot_run = MessageLabel()
        self.cannot_run.setObjectName("notice")
        self.cannot_run.setVisible(False)
        self._fit_host = QVBoxLayout()
        self._fit_host.addWidget(self.cannot_run)
        body = QWidget()
        layout = QVBoxLayout(body)
        widgets = (back, self.title, self.subtitle, self.source, self.notice, self.why, self.plan_button, self.table)
        for w in (*widgets, self.download_error):
            layout.addWidget(w)
        layout.addLayout(self._fit_host)
        layout.addWidget(self.card)
        layout.addStretch(1)
        self.page_scroll = scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def show_model(self, title: str, subtitle: str, rec: Recommendation, machine: Machine | None) -> None:
        self.machine, self.recommendation = machine, rec
        self.title.setText(title)
        sees = any(a.variant.sees_images for a in rec.assessments)
        self.subtitle.setText(subtitle + (" · Vision: reads images too" if sees else ""))
        self._show_why(rec)
        self.table.locked = ""
        self._fill_table(rec.assessments, None)
        # The table selects the starred row, but when that row number was already selected (the last
        # model's) it sends no signal, and the details stayed on another model: show them here.
        self._show_fit(rec.recommended or next(iter(rec.assessments), None))
        self.show_notice("")
        self.show_source("", "")
        self.card.setVisible(False)

    def _show_why(self, rec: Recommendation) -> None:
        self.why.setText(
            f"Recommended: {rec.recommended.variant.label} — {rec.why}"
            if rec.recommended
            else f"No variant fits this machine: {rec.why}"
        )
        repo = next((a.variant.repo_id for a in rec.assessments if a.variant.repo_id), "")
        self._plan_repo = repo if rec.recommended is None else ""
        self.plan_button.setVisible(bool(self._plan_repo))

    def _plan_clicked(self) -> None:
        if self._plan_repo:
            self.plan_requested.emit(self._plan_repo)

    def _fill_table(self, assessments: list[Assessment], keep: int | None) -> None:
        """Refill the table without its selection signal (which would rebuild the fit view being used);
        `keep`: the row to leave selected, else the table's choice (the starred one)."""
        self.table.blockSignals(True)
        try:
            self.table.set_assessments(assessments)
            if keep is not None and 0 <= keep < len(assessments):
                self.table.selectRow(keep)
        finally:
            self.table.blockSignals(False)
        self.table.updateGeometry()  # its size hint follows the row count

    def _replanned(self, plan: Plan) -> None:
        """The fit view's context or KV type changed: every variant's Context and tok/s at those settings."""
        fit, rec, machine = self.fit_view, self.recommendation, self.machine
        if fit is None or rec is None or machine is None or not rec.assessments:
            return
        rows = {i.row() for i in self.table.selectedIndexes()}
        again = assess(
            [a.variant for a in rec.assessments], machine, n_ctx=plan.requested_ctx, options=fit.current_options()
        )
        self.recommendation = again
        self._show_why(again)
        self._fill_table(again.assessments, min(rows) if rows else None)

    def _show_download_error(self, text: str) -> None:
        self.download_error.setText(text)
        self.download_error.setVisible(bool(text))

    def show_source(self, repo_id: str, page_url: str) -> None:
        """A link to the repo's page on the Hub (opened in the system browser); hidden with ""."""
        self.source.setText(
            f'<a href="{html.escape(page_url, quote=True)}">{html.escape(repo_id)} on the Hub</a>' if page_url else ""
        )
        self.source.setVisible(bool(page_url))

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

    def _fit_card(self, size: QSizeF) -> None:
        margins = self.card.contentsMargins()
        self.card.setFixedHeight(int(size.height()) + margins.top() + margins.bottom() + 2 * self.card.frameWidth())

    def show_card(self, markdown: str) -> None:
        """The repo's model card, rendered without remote resources; hidden when the repo has none."""
        self.card.show_markdown(markdown)
        self.card.setVisible(bool(markdown.strip()))

    def _show_fit(self, a: Assessment | None) -> None:
        if self.fit_view is not None:
            self._fit_host.removeWidget(self.fit_view)
            self.fit_view.hide()  # gone from the page now, not when the loop gets round to deleting it
            self.fit_view.deleteLater()
            self.fit_view = None
        if a is None:
            self.cannot_run.setVisible(False)
            return
        self.cannot_run.setVisible(not a.runnable)
        self.cannot_run.setText(f"{a.variant.label} cannot run on this machine: {a.reason}." if not a.runnable else "")
        if not a.runnable or a.plan is None or a.spec is None or self.machine is None:
            return
        self.fit_view = FitView(
            a.spec,
            self.machine,
            n_ctx=a.plan.requested_ctx,
            options=a.plan.options,
            slots=self.slots,
            projector=a.variant.projector_memory,
        )
        self.fit_view.plan_changed.connect(self._replanned)
        self._fit_host.addWidget(self.fit_view)
