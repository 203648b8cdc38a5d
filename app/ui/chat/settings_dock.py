"""Where the chat's Settings panel shows: beside the chat as a third column when the page already has the
room, else in the thread's place (the composer stays below it). Opening it never widens the window: a
column the page cannot hold would raise the window's minimum width, and the window would grow to it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QSplitter, QStackedWidget, QWidget

PANEL_WIDTH = 300  # the column's width beside the chat, at least the panel's own minimum


class SettingsDock:
    """`set_open(on)` from the header's Settings button; `place()` again when the page's width changes."""

    def __init__(
        self, panel: QWidget, splitter: QSplitter, center: QWidget, thread_stack: QStackedWidget, thread: QWidget
    ) -> None:
        """`splitter` holds the conversation list and `center` (the chat); `thread_stack` shows `thread`,
        and the panel in its place when there is no room beside it."""
        self.panel, self.splitter, self.center, self.thread_stack = panel, splitter, center, thread_stack
        self.thread = thread
        # Scrolled up and down on a short window; never sideways: the panel is given its width. Held by the chat
        # column, hidden, until it is placed: a panel never opened is deleted with its page.
        self.area = QScrollArea(center, widgetResizable=True)
        self.area.setObjectName("chatSettingsArea")
        self.area.setFrameShape(QFrame.Shape.NoFrame)
        self.area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.area.setWidget(panel)
        self.area.setVisible(False)
        self.is_open = False

    @property
    def beside(self) -> bool:
        """Open as a column beside the chat (else in the thread's place, or closed)."""
        return self.is_open and self.area.parent() is self.splitter

    def set_open(self, on: bool) -> None:
        self.is_open = on
        self.place()

    def column_width(self) -> int:
        bar = self.area.verticalScrollBar().sizeHint().width()
        return max(PANEL_WIDTH, self.panel.minimumSizeHint().width() + bar)

    def room_beside(self) -> int:
        """The width the splitter has beyond what the conversation list and the chat need."""
        used = 0
        for i in range(self.splitter.count()):
            widget = self.splitter.widget(i)
            if widget is None or widget is self.area or widget.isHidden():
                continue
            used += widget.minimumSizeHint().width() + self.splitter.handleWidth()
        return self.splitter.width() - used - self.splitter.handleWidth()

    def place(self) -> None:
        if not self.is_open:
            self.area.setVisible(False)
            self.thread_stack.setCurrentWidget(self.thread)
            return
        width = self.column_width()
        if self.room_beside() >= width:
            if self.area.parent() is not self.splitter:
                self.thread_stack.setCurrentWidget(self.thread)
                self.splitter.addWidget(self.area)
            self.area.setVisible(True)
            sizes = self.splitter.sizes()
            total = sum(sizes)
            others = total - width
            # The list keeps its width; the chat gives the panel its column.
            sizes[0] = min(sizes[0], max(0, others - self.center.minimumSizeHint().width()))
            self.splitter.setSizes([sizes[0], max(0, others - sizes[0]), width])
        else:
            if self.area.parent() is not self.thread_stack:
                self.thread_stack.addWidget(self.area)
            self.area.setVisible(True)
            self.thread_stack.setCurrentWidget(self.area)
