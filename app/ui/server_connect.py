"""The Server page's "Connect a tool" card: pick a tool, see where its configuration goes and the
configuration itself (one tab per part), Copy it with the real key, and Test the route the tool calls.

The page hands the card a `Target` (URL, key, model, context) whenever one of those changes; the card
writes the snippets from it with app.core.connect and masks the key on screen until the page reveals it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QTabWidget, QWidget

from app.core.connect import TOOL_IDS, TOOL_NAMES, ProbeResult, Route, Snippet, Target, probe_route, snippet_for
from app.ui.server_cards import Card, copy_text
from app.ui.server_model import mask_key
from app.ui.tasks import TaskRunner
from app.ui.theme import set_status

logger = logging.getLogger(__name__)

Probe = Callable[[str, str, str, Route], ProbeResult]  # (url, key, model, route), blocking


class ConnectCard(Card):
    """`show_target(target, reveal=)` from the page; `tool` (the combo), `tabs`, `where`, `note`,
    `copy_button`, `test_button` and `result` for the user (and the tests); `result_shown` when a Test
    shows its progress or its answer."""

    result_shown = Signal()

    def __init__(self, tasks: TaskRunner, probe: Probe = probe_route, parent: QWidget | None = None) -> None:
        """`probe` runs on the task pool, never on the UI thread."""
        super().__init__("Connect a tool", parent)
        self._tasks, self._probe = tasks, probe
        self._target = Target("http://127.0.0.1/v1")
        self._reveal = False
        self._tests = 0  # bumped per Test and per tool switch: a late answer for an older one is dropped

        self.tool = QComboBox()
        for tool in TOOL_IDS:
            self.tool.addItem(TOOL_NAMES[tool], tool)
        self.tool.currentIndexChanged.connect(self._tool_changed)
        self.copy_button = QPushButton("Copy")
        self.copy_button.clicked.connect(self.copy)
        self.test_button = QPushButton("Test")
        self.test_button.setToolTip("Send one tiny request through the API this tool calls")
        self.test_button.clicked.connect(self.test)
        row = QHBoxLayout()
        row.addWidget(QLabel("Tool"))
        row.addWidget(self.tool, 1)
        row.addWidget(self.copy_button)
        row.addWidget(self.test_button)
        self.where = QLabel()
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tabs = QTabWidget()
        self.tabs.currentChanged.connect(lambda _: self._show_where())
        self.tabs.setMinimumHeight(200)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.body.addLayout(row)
        self.body.addWidget(self.where)
        self.body.addWidget(self.tabs, 1)
        self.body.addWidget(self.note)
        self.body.addWidget(self.result)
        self._render()

    @property
    def tool_id(self) -> str:
        return str(self.tool.currentData())

    def snippet(self, *, reveal: bool = True) -> Snippet:
        """The chosen tool's snippet; with `reveal` False the key is masked, as shown until the page's Show."""
        t = self._target
        key = t.key if reveal or not t.key else mask_key(t.key)
        return snippet_for(self.tool_id, t.url, key, t.model, t.context_length)

    def show_target(self, target: Target, *, reveal: bool) -> None:
        """Main thread: the page's URL, key, model or reveal state changed."""
        self._target, self._reveal = target, reveal
        self._render()

    def copy(self) -> None:
        """The part shown, with the real key even while the card masks it."""
        copy_text(self.snippet().parts[max(0, self.tabs.currentIndex())].text, self.copy_button)

    def test(self) -> None:
        snippet, target, probe = self.snippet(), self._target, self._probe
        self._tests += 1
        ticket = self._tests
        self.test_button.setEnabled(False)
        self._set_result(f"Testing {snippet.api} at {target.root}…", None)

        def op() -> list[ProbeResult]:
            return [probe(target.url, target.key, target.model, route) for route in snippet.routes]

        def done(results: list[ProbeResult]) -> None:
            """Main thread."""
            self.test_button.setEnabled(True)
            if ticket == self._tests:
                self._set_result("\n".join(r.summary() for r in results), all(r.ok for r in results))

        def failed(exc: BaseException) -> None:
            """Main thread."""
            logger.error("the connect test failed", exc_info=exc)
            self.test_button.setEnabled(True)
            if ticket == self._tests:
                self._set_result(f"The test could not run: {exc}", False)

        self._tasks.run(op, done, failed, owner=self)

    # ---- showing ----

    def _tool_changed(self) -> None:
        self._tests += 1
        self._set_result("", None)
        self._render()

    def _render(self) -> None:
        snippet = self.snippet(reveal=self._reveal)
        titles = [part.title for part in snippet.parts]
        if titles != [self.tabs.tabText(i) for i in range(self.tabs.count())]:
            self._rebuild_tabs(titles)
        for i, part in enumerate(snippet.parts):
            edit = self.tabs.widget(i)
            if isinstance(edit, QPlainTextEdit) and edit.toPlainText() != part.text:
                edit.setPlainText(part.text)
        self.note.setText(snippet.note)
        self._show_where()

    def _rebuild_tabs(self, titles: list[str]) -> None:
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        while self.tabs.count():
            old = self.tabs.widget(0)
            self.tabs.removeTab(0)
            if old is not None:
                old.deleteLater()
        for title in titles:
            edit = QPlainTextEdit()
            edit.setReadOnly(True)
            edit.setFont(mono)
            edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            self.tabs.addTab(edit, title)

    def _show_where(self) -> None:
        parts = self.snippet(reveal=False).parts
        index = self.tabs.currentIndex()
        if 0 <= index < len(parts):
            self.where.setText(f"Goes in: {parts[index].where}")

    def _set_result(self, text: str, ok: bool | None) -> None:
        self.result.setText(text)
        set_status(self.result, None if ok is None else "success" if ok else "error")
        if text:
            self.result_shown.emit()  # the page scrolls it into view: it is the card's last line
